//! The shared Store suite: behaviour every `Store` must have, written once over `dyn Store`.
//!
//! Wire a store in with one line in its module of `store`:
//!
//! ```ignore
//! async fn make(limits: BucketLimits) -> super::suite::Fixture { ... }
//! super::suite::store_suite!(make);
//! ```
//!
//! which expands to one `#[tokio::test]` per case. `make` builds a fresh, empty store with the
//! given bucket caps; its [`Fixture`] carries whatever must live as long as the store (a
//! stand-in process, a temporary directory) and what the store can do ([`Capabilities`]).
//!
//! Readings are compared after [`normalize`]: BSON has no unsigned integers, so a store may
//! hand back `UInt(5)` as `Int(5)` and `UInt(u64::MAX)` as `Float(2^64)`. Values are chosen so
//! that every sum is exact in f64 whatever the order of addition (multiples of 1/4, small
//! integers, powers of two), so statistics are compared exactly.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bucketd::model::{
    Batch, FieldName, FieldValue, HOUR_MS, Reading, Series, TimestampMs, WriterId, fold_points,
    hour_start,
};
use bucketd::store::{
    BucketLimits, FieldStats, Order, RangeQuery, RollupQuery, RollupRow, SensorInfo, SensorQuery,
    Store, StoreError,
};
pub use bucketd_test_support::store::{
    W, batches, normalize, normalized, range, read, reading, series, write_ok,
};
use futures::future::BoxFuture;

/// Every case must finish within this, stand-ins included (the MongoDB stand-in is far slower
/// than MongoDB).
pub const CASE_TIMEOUT: Duration = Duration::from_secs(300);

/// 2024-01-01T00:00:00Z: an hour boundary.
pub const T0: TimestampMs = 1_704_067_200_000;
pub const MINUTE: i64 = 60_000;

/// What a store can do beyond the common contract.
#[derive(Clone, Copy, Debug, Default)]
pub struct Capabilities {
    /// A reading too large for one of the store's documents (a MongoDB document is at most
    /// 16 MiB) is refused with a permanent error, failing only its own batch. Stores without
    /// such a limit must store that reading instead.
    pub rejects_oversized_reading: bool,
    /// `Store::expire` deletes readings past the retention (the cases of
    /// `store::retention` are skipped for a store without).
    pub retention_pass: bool,
    /// `--rollup-retention` deletes whole days of hour statistics (MongoDB's day documents)
    /// rather than single hours.
    pub rollup_retention_by_day: bool,
}

/// Makes the store's next batch with sequence numbers land only its first `n` readings and
/// fail retriably, as a write whose reply was lost part-way.
pub type BreakOff = Box<dyn Fn(usize) + Send + Sync>;

/// A fresh, empty store and what keeps it alive.
pub struct Fixture {
    pub store: Arc<dyn Store>,
    pub caps: Capabilities,
    /// For stores that can be told to fail mid-batch; MongoDB fails one for real instead (an
    /// oversized reading in the middle of a batch).
    pub break_off: Option<BreakOff>,
    _guard: Box<dyn Any + Send>,
}

impl Fixture {
    pub fn new(store: Arc<dyn Store>, caps: Capabilities, guard: impl Any + Send) -> Fixture {
        Fixture { store, caps, break_off: None, _guard: Box::new(guard) }
    }

    pub fn with_break_off(mut self, break_off: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.break_off = Some(Box::new(break_off));
        self
    }
}

pub type Make<'a> = &'a (dyn Fn(BucketLimits) -> BoxFuture<'static, Fixture> + Sync);

/// Runs one case within [`CASE_TIMEOUT`].
pub async fn run(name: &str, case: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(CASE_TIMEOUT, case).await.is_err() {
        panic!("store suite case {name} did not finish within {CASE_TIMEOUT:?}");
    }
}

/// Expands to one test per case of the suite, each with a store from `$make`
/// (`async fn(BucketLimits) -> Fixture`).
macro_rules! store_suite {
    ($make:path) => {
        $crate::store::suite::store_suite!(@cases $make;
            spill_by_count,
            spill_by_size,
            batch_larger_than_a_document,
            stats_exact_across_flushes,
            late_and_out_of_order_readings,
            ranges_across_hours_and_spilled_buckets,
            descending_order_and_limit,
            resume_after_repeated_points,
            points_written_again_match_the_model,
            one_batch_fails_the_others_land,
            awkward_field_names_round_trip,
            rollups_from_stats_match_rollups_from_readings,
            sensors_by_tag_and_measurement,
            sensors_are_listed_per_database,
            empty_and_invalid_requests,
            high_water_marks_follow_writes,
            a_failed_batch_leaves_the_prefix_its_mark_names,
            marks_are_kept_per_writer,
            first_and_last_of_each_hour,
            series_generation_moves_with_new_series_only,
        );
        $crate::store::suite::store_suite!(@retention $make;
            expired_hours_keep_exact_statistics,
            retention_is_per_hour_and_spares_other_series,
            a_databases_own_retention_spares_the_others,
        );
    };
    (@retention $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                use $crate::store::{retention, suite};
                let make = |limits| -> futures::future::BoxFuture<'static, suite::Fixture> {
                    Box::pin($make(limits))
                };
                suite::run(stringify!($case), retention::$case(&make)).await;
            }
        )*
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                use $crate::store::suite;
                let make = |limits| -> futures::future::BoxFuture<'static, suite::Fixture> {
                    Box::pin($make(limits))
                };
                suite::run(stringify!($case), suite::$case(&make)).await;
            }
        )*
    };
}
pub(crate) use store_suite;

// ---------------------------------------------------------------------------------------------
// Helpers

/// The points of `written` (readings in the order written): the readings of one timestamp
/// folded into one, the later value of a field winning.
pub fn points(written: &[Reading]) -> Vec<Reading> {
    let mut points = written.to_vec();
    fold_points(&mut points);
    points
}

/// Readings of `[from, to)` as a store must return them ascending: one per point, by time.
pub fn expected_range(written: &[Reading], from: TimestampMs, to: TimestampMs) -> Vec<Reading> {
    let mut out: Vec<Reading> =
        points(written).into_iter().filter(|r| r.ts >= from && r.ts < to).map(normalize).collect();
    out.sort_by_key(|r| r.ts);
    out
}

/// Rollup rows computed from the readings themselves.
pub fn expected_rollups(
    written: &[Reading],
    from: TimestampMs,
    to: TimestampMs,
    step: i64,
    fields: Option<&[&str]>,
) -> Vec<RollupRow> {
    let mut rows: BTreeMap<TimestampMs, BTreeMap<String, FieldStats>> = BTreeMap::new();
    for r in points(written).iter().filter(|r| r.ts >= from && r.ts < to) {
        for (name, value) in &r.fields {
            if fields.is_some_and(|f| !f.contains(&name.as_str())) {
                continue;
            }
            if let Some(v) = value.as_f64() {
                rows.entry(r.ts.div_euclid(step) * step)
                    .or_default()
                    .entry(name.to_string())
                    .and_modify(|s| s.merge(&FieldStats::of(r.ts, v)))
                    .or_insert_with(|| FieldStats::of(r.ts, v));
            }
        }
    }
    rows.into_iter().map(|(start, fields)| RollupRow { start, fields }).collect()
}

pub async fn rollups(
    store: &dyn Store,
    sensor: &str,
    from: TimestampMs,
    to: TimestampMs,
    step: i64,
    fields: Option<&[&str]>,
) -> Vec<RollupRow> {
    let query = RollupQuery {
        sensor: sensor.into(),
        from,
        to,
        step_ms: step,
        fields: fields.map(|f| f.iter().map(|s| s.to_string()).collect()),
    };
    store.rollups(query.clone()).await.unwrap_or_else(|e| panic!("{query:?} failed: {e}"))
}

/// A deterministic pseudo-random sequence (64-bit LCG), so failures reproduce.
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Lcg(seed)
    }
    pub fn next(&mut self, bound: u64) -> u64 {
        self.0 =
            self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

/// A reading with a mix of value types; numeric values keep every sum exact.
fn mixed_reading(rng: &mut Lcg, ts: TimestampMs) -> Reading {
    let mut fields = vec![
        ("temp".into(), FieldValue::Float(rng.next(400) as f64 * 0.25 - 50.0)),
        ("count".into(), FieldValue::Int(rng.next(2000) as i64 - 1000)),
    ];
    match rng.next(4) {
        0 => fields.push(("ok".into(), FieldValue::Bool(rng.next(2) == 0))),
        1 => fields.push(("status".into(), FieldValue::Str(format!("s{}", rng.next(10))))),
        2 => fields.push(("u".into(), FieldValue::UInt(rng.next(1000)))),
        _ => fields.push(("big".into(), FieldValue::UInt(u64::MAX))),
    }
    Reading { ts, fields: fields.into() }
}

// ---------------------------------------------------------------------------------------------
// Store-independent

#[test]
fn batches_keep_the_hour_invariant_and_the_order() {
    let s = series("s", "m", &[]);
    let readings: Vec<Reading> = [T0 + 5, T0 - 1, T0 + HOUR_MS, T0 + 1, -1, 0, -HOUR_MS]
        .iter()
        .map(|&ts| reading(ts, &[("v", FieldValue::Int(ts))]))
        .collect();
    let out = batches(&s, &readings);
    assert_eq!(
        out.iter().map(|b| b.hour).collect::<Vec<_>>(),
        vec![T0, T0 - HOUR_MS, T0 + HOUR_MS, -HOUR_MS, 0]
    );
    for b in &out {
        assert!(b.readings().all(|r| hour_start(r.ts) == b.hour), "{b:?}");
    }
    assert_eq!(out[0].readings().map(|r| r.ts).collect::<Vec<_>>(), vec![T0 + 5, T0 + 1]);
    assert_eq!(out[3].readings().map(|r| r.ts).collect::<Vec<_>>(), vec![-1, -HOUR_MS]);
    assert_eq!(out.iter().map(|b| b.len()).sum::<usize>(), readings.len());
}

// ---------------------------------------------------------------------------------------------
// Cases

/// Buckets close at the count cap; every reading survives, in order, with exact statistics.
pub async fn spill_by_count(make: Make<'_>) {
    let cap = 10;
    let f =
        make(BucketLimits { max_readings: cap, max_bytes: BucketLimits::MAX_BYTES_CEILING }).await;
    let s = series("spill-count", "m", &[]);
    let mut written = Vec::new();
    let mut created = 0;
    let mut upper = 0;
    for (flush, k) in [25u32, 7, 3, 10, 1].into_iter().enumerate() {
        let readings: Vec<Reading> = (0..k)
            .map(|i| {
                let ts = T0 + (flush as i64) * MINUTE + i64::from(i);
                reading(ts, &[("v", FieldValue::Float(f64::from(i) * 0.5))])
            })
            .collect();
        let reports = write_ok(&*f.store, &batches(&s, &readings)).await;
        created += reports.iter().map(|r| r.buckets_created).sum::<u32>();
        upper += k.div_ceil(cap) + 1;
        written.extend(readings);
    }
    let total = written.len() as u32;
    assert!(created >= total.div_ceil(cap), "{created} buckets for {total} readings");
    assert!(created <= upper, "{created} buckets, at most {upper} expected");
    assert_eq!(
        read(&*f.store, range(s.key(), T0, T0 + HOUR_MS)).await,
        expected_range(&written, T0, T0 + HOUR_MS)
    );
    assert_eq!(
        rollups(&*f.store, s.key(), T0, T0 + HOUR_MS, HOUR_MS, None).await,
        expected_rollups(&written, T0, T0 + HOUR_MS, HOUR_MS, None)
    );
}

/// Buckets close at the size cap.
pub async fn spill_by_size(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 1000, max_bytes: 4096 }).await;
    let s = series("spill-size", "m", &[]);
    let payload = "x".repeat(500);
    let mut written = Vec::new();
    let mut created = 0;
    for flush in 0..5 {
        let readings: Vec<Reading> = (0..10)
            .map(|i| {
                reading(
                    T0 + flush * MINUTE + i,
                    &[("msg", FieldValue::Str(payload.clone())), ("v", FieldValue::Int(i))],
                )
            })
            .collect();
        let reports = write_ok(&*f.store, &batches(&s, &readings)).await;
        created += reports.iter().map(|r| r.buckets_created).sum::<u32>();
        written.extend(readings);
    }
    // Each reading is more than 500 bytes, so a 4096-byte bucket holds at most 8.
    assert!(created >= (written.len() as u32).div_ceil(8), "only {created} buckets");
    assert_eq!(
        read(&*f.store, range(s.key(), T0, T0 + HOUR_MS)).await,
        expected_range(&written, T0, T0 + HOUR_MS)
    );
}

/// One batch that alone would make a bucket larger than 16 MiB, with the size cap at its
/// ceiling: split across buckets, nothing dropped, the other batch of the write unaffected.
pub async fn batch_larger_than_a_document(make: Make<'_>) {
    let f =
        make(BucketLimits { max_readings: 100_000, max_bytes: BucketLimits::MAX_BYTES_CEILING })
            .await;
    let big = series("big-batch", "m", &[]);
    let small = series("small-batch", "m", &[]);
    let blob = "b".repeat(60 * 1024);
    let readings: Vec<Reading> = (0..300)
        .map(|i| {
            reading(T0 + i, &[("blob", FieldValue::Str(blob.clone())), ("i", FieldValue::Int(i))])
        })
        .collect();
    let others = vec![reading(T0 + 7, &[("v", FieldValue::Float(1.25))])];
    let mut all = batches(&big, &readings);
    all.extend(batches(&small, &others));
    let reports = write_ok(&*f.store, &all).await;
    assert!(reports[0].buckets_created >= 2, "{reports:?}");
    let back = read(&*f.store, range(big.key(), T0, T0 + HOUR_MS)).await;
    assert_eq!(back.len(), readings.len());
    assert!(
        back == expected_range(&readings, T0, T0 + HOUR_MS),
        "readings differ after the round trip"
    );
    assert_eq!(read(&*f.store, range(small.key(), T0, T0 + HOUR_MS)).await, normalized(&others));
    assert_eq!(
        rollups(&*f.store, big.key(), T0, T0 + HOUR_MS, HOUR_MS, None).await,
        expected_rollups(&readings, T0, T0 + HOUR_MS, HOUR_MS, None)
    );
}

/// Statistics stay exact over many flushes into spilling buckets, per hour and merged over
/// several hours, for all fields and a chosen few.
pub async fn stats_exact_across_flushes(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 7, max_bytes: 64 * 1024 }).await;
    let s = series("stats", "m", &[]);
    let mut rng = Lcg::new(7);
    let mut written = Vec::new();
    for _ in 0..20 {
        let k = 1 + rng.next(6);
        let readings: Vec<Reading> = (0..k)
            .map(|_| {
                let ts = T0 + rng.next(3 * HOUR_MS as u64) as i64;
                mixed_reading(&mut rng, ts)
            })
            .collect();
        write_ok(&*f.store, &batches(&s, &readings)).await;
        written.extend(readings);
    }
    let (from, to) = (T0, T0 + 3 * HOUR_MS);
    for step in [HOUR_MS, 3 * HOUR_MS] {
        assert_eq!(
            rollups(&*f.store, s.key(), from, to, step, None).await,
            expected_rollups(&written, from, to, step, None),
            "step {step}"
        );
    }
    let some: &[&str] = &["temp", "big", "absent", "status"];
    assert_eq!(
        rollups(&*f.store, s.key(), from, to, HOUR_MS, Some(some)).await,
        expected_rollups(&written, from, to, HOUR_MS, Some(some))
    );
    // Finer and unaligned: buckets written out of order, spilled, and some within one step.
    let (from, to) = (T0 + 60_000, T0 + 3 * HOUR_MS - 1);
    for step in [7 * 60_000, HOUR_MS, 3 * HOUR_MS] {
        for fields in [None, Some(some)] {
            assert_eq!(
                rollups(&*f.store, s.key(), from, to, step, fields).await,
                expected_rollups(&written, from, to, step, fields),
                "step {step}, fields {fields:?}"
            );
        }
    }
    let (from, to) = (T0, T0 + 3 * HOUR_MS);
    assert_eq!(read(&*f.store, range(s.key(), from, to)).await, expected_range(&written, from, to));
}

/// Late readings (an hour already flushed past) and readings out of order within a batch land
/// in their own hour and come back sorted; a reading before 1970 works like any other; a
/// timestamp written twice in one batch is one point.
pub async fn late_and_out_of_order_readings(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 4, max_bytes: 64 * 1024 }).await;
    let s = series("late", "m", &[]);
    let flushes: Vec<Vec<TimestampMs>> = vec![
        vec![T0 + 2 * HOUR_MS + 50, T0 + 2 * HOUR_MS + 10],
        vec![T0 + 30, T0 + 10, T0 + 20, T0 + HOUR_MS - 1],
        vec![T0 + 2 * HOUR_MS + 5, T0 + 15, T0 + HOUR_MS + 3, T0 + 2 * HOUR_MS + 5],
        vec![-1, -HOUR_MS, 0],
        vec![T0 + 5, T0 + 25, T0 + 35],
    ];
    let mut written = Vec::new();
    for (i, stamps) in flushes.iter().enumerate() {
        let readings: Vec<Reading> = stamps
            .iter()
            .enumerate()
            .map(|(j, &ts)| reading(ts, &[("v", FieldValue::Int((i * 10 + j) as i64))]))
            .collect();
        write_ok(&*f.store, &batches(&s, &readings)).await;
        written.extend(readings);
    }
    let (from, to) = (T0, T0 + 3 * HOUR_MS);
    assert_eq!(read(&*f.store, range(s.key(), from, to)).await, expected_range(&written, from, to));
    let hours = rollups(&*f.store, s.key(), from, to, HOUR_MS, None).await;
    assert_eq!(hours, expected_rollups(&written, from, to, HOUR_MS, None));
    assert_eq!(hours.iter().map(|r| r.fields["v"].count).collect::<Vec<_>>(), vec![8, 1, 3]);
    let early = read(&*f.store, range(s.key(), -HOUR_MS, 1)).await;
    assert_eq!(early, expected_range(&written, -HOUR_MS, 1));
    assert_eq!(early.len(), 3);
}

/// Ranges that start and end inside hours, over spilled buckets.
pub async fn ranges_across_hours_and_spilled_buckets(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 5, max_bytes: 64 * 1024 }).await;
    let s = series("ranges", "m", &[]);
    let mut rng = Lcg::new(11);
    let written: Vec<Reading> =
        (0..60).map(|i| mixed_reading(&mut rng, T0 + i * 5 * MINUTE)).collect();
    for chunk in written.chunks(8) {
        write_ok(&*f.store, &batches(&s, chunk)).await;
    }
    for (from, to) in [
        (T0 + HOUR_MS + 15 * MINUTE, T0 + 3 * HOUR_MS + 5 * MINUTE),
        (T0 - HOUR_MS, T0 + 10 * HOUR_MS),
        (T0 + 20 * MINUTE, T0 + 20 * MINUTE + 1),
        (T0 + 21 * MINUTE, T0 + 24 * MINUTE),
        (T0 + 2 * HOUR_MS, T0 + 3 * HOUR_MS),
    ] {
        assert_eq!(
            read(&*f.store, range(s.key(), from, to)).await,
            expected_range(&written, from, to),
            "[{from}, {to})"
        );
    }
    assert!(read(&*f.store, range("no-such-sensor", T0, T0 + HOUR_MS)).await.is_empty());
}

/// Descending order is the exact reverse of ascending, and a limit cuts either end.
pub async fn descending_order_and_limit(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 3, max_bytes: 64 * 1024 }).await;
    let s = series("order", "m", &[]);
    // Readings straddle hour and bucket boundaries.
    let written: Vec<Reading> = (0..24)
        .map(|i| reading(T0 + HOUR_MS - 6 * MINUTE + i * MINUTE / 2, &[("v", FieldValue::Int(i))]))
        .collect();
    write_ok(&*f.store, &batches(&s, &written)).await;
    let (from, to) = (T0, T0 + 2 * HOUR_MS);
    let asc = read(&*f.store, range(s.key(), from, to)).await;
    assert_eq!(asc, expected_range(&written, from, to));
    let mut desc_query = range(s.key(), from, to);
    desc_query.order = Order::Desc;
    let desc = read(&*f.store, desc_query.clone()).await;
    let mut reversed = asc.clone();
    reversed.reverse();
    assert_eq!(desc, reversed);
    for limit in [0, 1, 5, 24, 100] {
        let mut q = range(s.key(), from, to);
        q.limit = Some(limit);
        assert_eq!(
            read(&*f.store, q).await,
            asc[..limit.min(asc.len())].to_vec(),
            "asc limit {limit}"
        );
        desc_query.limit = Some(limit);
        assert_eq!(
            read(&*f.store, desc_query.clone()).await,
            reversed[..limit.min(reversed.len())].to_vec(),
            "desc limit {limit}"
        );
    }
}

/// A timestamp written again, in one batch or in later ones, is one point that holds the last
/// value written; paging with a limit, resuming from the last timestamp seen and skipping the
/// readings already seen at it, is gap-free and duplicate-free, ascending and descending,
/// across buckets.
pub async fn resume_after_repeated_points(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 4, max_bytes: 64 * 1024 }).await;
    let s = series("resume", "m", &[]);
    let mut written = Vec::new();
    let mut id = 0;
    for flush in 0..4 {
        let mut readings = Vec::new();
        for ts in [T0 + 1000, T0 + 1000, T0 + 2000, T0 + 1000, T0 + 3000 + flush] {
            readings.push(reading(ts, &[("id", FieldValue::Int(id))]));
            id += 1;
        }
        write_ok(&*f.store, &batches(&s, &readings)).await;
        written.extend(readings);
    }
    let (from, to) = (T0, T0 + HOUR_MS);
    for order in [Order::Asc, Order::Desc] {
        let full = read(&*f.store, RangeQuery { order, ..range(s.key(), from, to) }).await;
        let mut want = expected_range(&written, from, to);
        if order == Order::Desc {
            want.reverse();
        }
        assert_eq!(full, want);
        assert_eq!(full.len(), 6);
        // The same query twice gives the same order.
        assert_eq!(read(&*f.store, RangeQuery { order, ..range(s.key(), from, to) }).await, full);
        for page_size in [1, 3, 5] {
            let mut paged: Vec<Reading> = Vec::new();
            let (mut lo, mut hi) = (from, to);
            let mut pages = 0;
            loop {
                pages += 1;
                assert!(pages < 100, "paging does not end");
                let seen_at_edge = paged
                    .last()
                    .map_or(0, |last| paged.iter().rev().take_while(|r| r.ts == last.ts).count());
                let q = RangeQuery {
                    sensor: s.key().to_owned(),
                    from: lo,
                    to: hi,
                    order,
                    limit: Some(page_size + seen_at_edge),
                };
                let page = read(&*f.store, q).await;
                let fresh: Vec<Reading> = page.into_iter().skip(seen_at_edge).collect();
                if fresh.is_empty() {
                    break;
                }
                paged.extend(fresh);
                let edge = paged.last().expect("not empty").ts;
                match order {
                    Order::Asc => lo = edge,
                    Order::Desc => hi = edge + 1,
                }
            }
            assert_eq!(paged, full, "{order:?}, pages of {page_size}");
        }
    }
    // The point at T0 + 1000 holds the last of its twelve writes: the fourth flush's.
    let point = read(&*f.store, range(s.key(), T0 + 1000, T0 + 1001)).await;
    assert_eq!(point, vec![reading(T0 + 1000, &[("id", FieldValue::Int(18))])]);
    let hour = rollups(&*f.store, s.key(), T0, T0 + HOUR_MS, HOUR_MS, None).await;
    assert_eq!(hour[0].fields["id"].count, 6, "statistics count each point once");
}

/// Writes that repeat points at random, in one batch and across writes, across buckets and
/// hours, with fields that come and go: after each write the readings and the rollups
/// (whole hours from the statistics, finer steps from the readings) are those of the model,
/// one reading per point with the later values winning.
pub async fn points_written_again_match_the_model(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 4, max_bytes: 64 * 1024 }).await;
    let s = series("again", "m", &[]);
    let mut rng = Lcg::new(44);
    let mut written = Vec::new();
    let (from, to) = (T0, T0 + 2 * HOUR_MS);
    for _ in 0..12 {
        let readings: Vec<Reading> = (0..1 + rng.next(7))
            .map(|_| {
                let ts = T0 + rng.next(24) as i64 * 5 * MINUTE;
                let mut fields = Vec::new();
                for name in ["a", "b", "c"] {
                    if rng.next(2) == 0 {
                        fields.push((name, FieldValue::Float(rng.next(80) as f64 * 0.25 - 10.0)));
                    }
                }
                if fields.is_empty() {
                    fields.push(("a", FieldValue::Float(1.0)));
                }
                reading(ts, &fields)
            })
            .collect();
        write_ok(&*f.store, &batches(&s, &readings)).await;
        written.extend(readings);
        let got = by_name(read(&*f.store, range(s.key(), from, to)).await);
        assert_eq!(got, by_name(expected_range(&written, from, to)));
        for step in [HOUR_MS, 10 * MINUTE] {
            let got = rollups(&*f.store, s.key(), from, to, step, None).await;
            assert_eq!(got, expected_rollups(&written, from, to, step, None), "step {step}");
        }
    }
    assert!(points(&written).len() < written.len(), "some points were written again");
}

/// Readings with their fields sorted by name: a point written again keeps its fields' order
/// and adds new ones after them, which the model need not follow.
fn by_name(mut readings: Vec<Reading>) -> Vec<Reading> {
    for r in &mut readings {
        r.fields.sort_by(|a, b| a.0.cmp(&b.0));
    }
    readings
}

/// In one write, a batch the store must refuse fails alone and permanently; the batches
/// before and after it land.
pub async fn one_batch_fails_the_others_land(make: Make<'_>) {
    let f = make(BucketLimits::default()).await;
    let good_a = series("good-a", "m", &[]);
    let bad = series("oversized", "m", &[]);
    let good_b = series("good-b", "m", &[]);
    // 256 fields of 64 KiB (the default input limits allow both): more than 16 MiB.
    let huge: Vec<(FieldName, FieldValue)> = (0..256)
        .map(|i| (format!("f{i:03}").into(), FieldValue::Str("z".repeat(64 * 1024))))
        .collect();
    let oversized = Reading { ts: T0 + 2, fields: huge.into() };
    let a = vec![reading(T0 + 1, &[("v", FieldValue::Int(1))])];
    let b = vec![reading(T0 + 3, &[("v", FieldValue::Int(3))])];
    let mut all = batches(&good_a, &a);
    all.extend(batches(&bad, std::slice::from_ref(&oversized)));
    all.extend(batches(&good_b, &b));
    let results = f.store.write(W, &all).await;
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(results[2].is_ok(), "{:?}", results[2]);
    let stored = read(&*f.store, range(bad.key(), T0, T0 + HOUR_MS)).await;
    if f.caps.rejects_oversized_reading {
        match &results[1] {
            Err(e @ StoreError::Rejected(_)) => assert!(!e.is_retriable()),
            other => panic!("expected a permanent rejection, got {other:?}"),
        }
        assert!(stored.is_empty(), "a refused batch left readings behind");
    } else {
        assert!(results[1].is_ok(), "{:?}", results[1]);
        assert_eq!(stored, vec![oversized]);
    }
    assert_eq!(read(&*f.store, range(good_a.key(), T0, T0 + HOUR_MS)).await, a);
    assert_eq!(read(&*f.store, range(good_b.key(), T0, T0 + HOUR_MS)).await, b);
}

/// Field names that look like paths, operators, prefixes of each other, or the store's own
/// keys round-trip through writes (statistics updates included), range queries and rollups.
pub async fn awkward_field_names_round_trip(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 3, max_bytes: 64 * 1024 }).await;
    let s = series("names", "m.x", &[("tag.with.dots", "$value"), ("$tag", "a.b")]);
    let names = [
        "a",
        "a.sum",
        "a.min",
        "a.b",
        "a.b.c",
        "$x",
        "$inc",
        "x$",
        "%",
        "%2E",
        "%24",
        "100%",
        "t",
        "f",
        "n",
        "_id",
        "r",
        "stats",
        "r.t",
        "stats.a.sum",
        ".",
        "..",
        "$",
        "é.ü",
    ];
    let mut written = Vec::new();
    for i in 0..7i64 {
        let fields: Vec<(FieldName, FieldValue)> = names
            .iter()
            .enumerate()
            .map(|(j, &n)| (n.into(), FieldValue::Float((i * 100 + j as i64) as f64 * 0.25)))
            .chain([("$str.x".into(), FieldValue::Str(format!("v{i}")))])
            .collect();
        written.push(Reading { ts: T0 + i * 7 * MINUTE, fields: fields.into() });
    }
    for chunk in written.chunks(2) {
        write_ok(&*f.store, &batches(&s, chunk)).await;
    }
    let (from, to) = (T0, T0 + HOUR_MS);
    assert_eq!(read(&*f.store, range(s.key(), from, to)).await, expected_range(&written, from, to));
    let by_hour = rollups(&*f.store, s.key(), from, to, HOUR_MS, None).await;
    assert_eq!(by_hour, expected_rollups(&written, from, to, HOUR_MS, None));
    assert_eq!(by_hour[0].fields.len(), names.len());
    let fine = rollups(&*f.store, s.key(), from, to, 10 * MINUTE, None).await;
    assert_eq!(fine, expected_rollups(&written, from, to, 10 * MINUTE, None));
    let chosen: &[&str] = &["a.sum", "$x", "%2E", "a"];
    for step in [HOUR_MS, 10 * MINUTE] {
        let rows = rollups(&*f.store, s.key(), from, to, step, Some(chosen)).await;
        assert_eq!(rows, expected_rollups(&written, from, to, step, Some(chosen)), "step {step}");
        assert!(rows.iter().all(|r| r.fields.len() == chosen.len()));
    }
    let found = f
        .store
        .sensors(SensorQuery {
            tags: vec![("tag.with.dots".into(), "$value".into())],
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("sensors");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].tags, s.tag_vec());
    assert_eq!(found[0].measurement, "m.x");
}

/// Whole-hour rollups come from bucket statistics; finer steps and ranges that cut hours come
/// from the readings. Both agree with each other and with the readings.
pub async fn rollups_from_stats_match_rollups_from_readings(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 6, max_bytes: 64 * 1024 }).await;
    let s = series("rollups", "m", &[]);
    let mut rng = Lcg::new(3);
    // Nothing in the last minute of the fourth hour, so [T0, T0 + 4h - 1min) holds the same
    // readings as [T0, T0 + 4h).
    let mut written: Vec<Reading> = (0..80)
        .map(|_| {
            let ts = T0 + rng.next((4 * HOUR_MS - MINUTE) as u64) as i64;
            mixed_reading(&mut rng, ts)
        })
        .collect();
    written.push(mixed_reading(&mut rng, T0 + 5 * HOUR_MS + 1));
    for chunk in written.chunks(9) {
        write_ok(&*f.store, &batches(&s, chunk)).await;
    }
    let (from, to) = (T0, T0 + 4 * HOUR_MS);
    let from_stats = rollups(&*f.store, s.key(), from, to, HOUR_MS, None).await;
    assert_eq!(from_stats, expected_rollups(&written, from, to, HOUR_MS, None));
    assert_eq!(from_stats.len(), 4);
    let from_readings = rollups(&*f.store, s.key(), from, to - MINUTE, HOUR_MS, None).await;
    assert_eq!(from_readings, from_stats);
    for (lo, hi, step) in [
        (from, to, 15 * MINUTE),
        (from, to, 7 * MINUTE + 3),
        (from + 30 * MINUTE, to, HOUR_MS),
        (from + 30 * MINUTE, to + 2 * HOUR_MS, 2 * HOUR_MS),
        (from, to + 2 * HOUR_MS, 2 * HOUR_MS),
        (from - 24 * HOUR_MS, to + 24 * HOUR_MS, 24 * HOUR_MS),
    ] {
        assert_eq!(
            rollups(&*f.store, s.key(), lo, hi, step, None).await,
            expected_rollups(&written, lo, hi, step, None),
            "[{lo}, {hi}) step {step}"
        );
    }
    let only: &[&str] = &["count"];
    assert_eq!(
        rollups(&*f.store, s.key(), from, to, 20 * MINUTE, Some(only)).await,
        expected_rollups(&written, from, to, 20 * MINUTE, Some(only))
    );
}

/// Sensors filtered by every given tag and by measurement, ordered by key, with first and
/// last reading times across hours and spilled buckets, paged with `after` and `limit`.
pub async fn sensors_by_tag_and_measurement(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 2, max_bytes: 64 * 1024 }).await;
    let fleet = [
        series("s-3", "air", &[("site", "a"), ("kind", "x")]),
        series("s-1", "air", &[("site", "a"), ("kind", "y")]),
        series("s-5", "water", &[("site", "a"), ("kind", "x")]),
        series("s-2", "air", &[("site", "b"), ("kind", "x")]),
        series("s-4", "air", &[("site", "a")]),
    ];
    let mut expected: BTreeMap<String, SensorInfo> = BTreeMap::new();
    let mut all = Vec::new();
    for (i, s) in fleet.iter().enumerate() {
        let i = i as i64;
        let stamps = [
            T0 + 2 * HOUR_MS + i,
            T0 + i * MINUTE,
            T0 + HOUR_MS + i,
            T0 + 3 * HOUR_MS - i,
            T0 + 5 + i,
        ];
        let readings: Vec<Reading> =
            stamps.iter().map(|&ts| reading(ts, &[("v", FieldValue::Int(i))])).collect();
        expected.insert(
            s.key().to_owned(),
            SensorInfo {
                key: s.key().to_owned(),
                measurement: s.measurement().to_owned(),
                tags: s.tag_vec(),
                first: *stamps.iter().min().expect("stamps"),
                last: *stamps.iter().max().expect("stamps"),
            },
        );
        all.extend(batches(s, &readings));
    }
    write_ok(&*f.store, &all).await;
    let pick =
        |keys: &[&str]| -> Vec<SensorInfo> { keys.iter().map(|k| expected[*k].clone()).collect() };
    let query = |tags: &[(&str, &str)],
                 measurement: Option<&str>,
                 after: Option<&str>,
                 limit: usize| SensorQuery {
        database: Default::default(),
        tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        measurement: measurement.map(str::to_owned),
        after: after.map(str::to_owned),
        limit,
    };
    let cases: Vec<(SensorQuery, Vec<SensorInfo>)> = vec![
        (query(&[], None, None, 100), pick(&["s-1", "s-2", "s-3", "s-4", "s-5"])),
        (query(&[("site", "a")], None, None, 100), pick(&["s-1", "s-3", "s-4", "s-5"])),
        (query(&[("site", "a"), ("kind", "x")], None, None, 100), pick(&["s-3", "s-5"])),
        (query(&[("kind", "x"), ("site", "a")], Some("air"), None, 100), pick(&["s-3"])),
        (query(&[], Some("water"), None, 100), pick(&["s-5"])),
        (query(&[("site", "a")], None, None, 2), pick(&["s-1", "s-3"])),
        (query(&[("site", "a")], None, Some("s-3"), 2), pick(&["s-4", "s-5"])),
        (query(&[("site", "a")], None, Some("s-5"), 2), vec![]),
        (query(&[], None, Some("s-10"), 1), pick(&["s-2"])),
        (query(&[("site", "c")], None, None, 100), vec![]),
        (query(&[("site", "b"), ("kind", "y")], None, None, 100), vec![]),
        (query(&[("site", "a")], Some("soil"), None, 100), vec![]),
        (query(&[], None, None, 0), vec![]),
    ];
    for (q, want) in cases {
        let got = f.store.sensors(q.clone()).await.unwrap_or_else(|e| panic!("{q:?}: {e}"));
        assert_eq!(got, want, "{q:?}");
    }
}

/// Requests with nothing to do succeed with nothing; a step that is not positive is refused.
/// The same series in three databases: each listing holds its database's only, by tag,
/// by measurement and from a cursor alike, and each reads its own readings.
/// A store that tells its series generation changes it by the time the write creating a
/// series returns, and keeps it while writes only add readings to known series.
pub async fn series_generation_moves_with_new_series_only(make: Make<'_>) {
    let f = make(BucketLimits::default()).await;
    let Some(before) = f.store.series_generation() else { return };
    let a = series("gen-a", "m", &[("site", "a")]);
    let b = series("gen-b", "m", &[("site", "b")]);
    let one = |ts| reading(ts, &[("v", FieldValue::Float(1.0))]);
    write_ok(&*f.store, &batches(&a, &[one(T0)])).await;
    let after_a = f.store.series_generation().expect("still told");
    assert_ne!(after_a, before, "a series was created");
    // More readings of a known series, in this hour and another.
    write_ok(&*f.store, &batches(&a, &[one(T0 + MINUTE), one(T0 + 2 * HOUR_MS)])).await;
    assert_eq!(f.store.series_generation(), Some(after_a), "no series was created");
    write_ok(&*f.store, &[batches(&a, &[one(T0 + 3 * MINUTE)]), batches(&b, &[one(T0)])].concat())
        .await;
    assert_ne!(f.store.series_generation(), Some(after_a), "series b was created");
}

pub async fn sensors_are_listed_per_database(make: Make<'_>) {
    use bucketd::databases::Database;
    let f = make(BucketLimits { max_readings: 4, max_bytes: 64 * 1024 }).await;
    let dbs = [
        Database::default(),
        Database::named("telegraf").unwrap(),
        Database::named("telegraf2").unwrap(),
    ];
    let mut all = Vec::new();
    for (d, db) in dbs.iter().enumerate() {
        for name in ["a", "b"] {
            let key = db.qualify(&format!("cpu,host={name}"));
            let s = series(&key, "cpu", &[("host", name)]);
            all.extend(batches(&s, &[reading(T0 + d as i64, &[("v", FieldValue::Int(d as i64))])]));
        }
    }
    write_ok(&*f.store, &all).await;
    for (d, db) in dbs.iter().enumerate() {
        let list =
            |tags: Vec<(String, String)>, measurement: Option<&str>, after: Option<String>| {
                f.store.sensors(SensorQuery {
                    database: db.clone(),
                    tags,
                    measurement: measurement.map(str::to_owned),
                    after,
                    limit: 10,
                })
            };
        let keys = |found: Vec<SensorInfo>| found.into_iter().map(|s| s.key).collect::<Vec<_>>();
        let both = vec![db.qualify("cpu,host=a"), db.qualify("cpu,host=b")];
        assert_eq!(keys(list(vec![], None, None).await.unwrap()), both, "{db:?}");
        assert_eq!(keys(list(vec![], Some("cpu"), None).await.unwrap()), both, "{db:?}");
        let host_b = vec![("host".to_owned(), "b".to_owned())];
        assert_eq!(keys(list(host_b, None, None).await.unwrap()), both[1..], "{db:?}");
        let after = Some(both[0].clone());
        assert_eq!(keys(list(vec![], None, after).await.unwrap()), both[1..], "{db:?}");
        let got = read(
            &*f.store,
            RangeQuery {
                sensor: both[0].clone(),
                from: T0,
                to: T0 + HOUR_MS,
                order: Order::Asc,
                limit: None,
            },
        )
        .await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].ts, T0 + d as i64, "{db:?} reads its own reading");
    }
}

pub async fn empty_and_invalid_requests(make: Make<'_>) {
    let f = make(BucketLimits::default()).await;
    f.store.ping().await.expect("ping");
    assert!(f.store.write(W, &[]).await.is_empty());
    let s = series("empty", "m", &[]);
    let empty = Batch::new(s.clone(), T0, vec![]);
    let one = batches(&s, &[reading(T0 + 1, &[("v", FieldValue::Bool(true))])]);
    let results = f.store.write(W, &[empty, one[0].clone()]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(read(&*f.store, range(s.key(), T0 + 5, T0 + 5)).await.is_empty());
    assert!(read(&*f.store, range(s.key(), T0 + 5, T0)).await.is_empty());
    assert_eq!(read(&*f.store, range(s.key(), T0, T0 + 2)).await.len(), 1);
    // Only non-numeric values: no statistics, so no rows.
    assert!(rollups(&*f.store, s.key(), T0, T0 + HOUR_MS, HOUR_MS, None).await.is_empty());
    assert!(rollups(&*f.store, s.key(), T0, T0 + HOUR_MS, MINUTE, None).await.is_empty());
    assert!(rollups(&*f.store, s.key(), T0 + HOUR_MS, T0, HOUR_MS, None).await.is_empty());
    for step in [0, -HOUR_MS] {
        let q = RollupQuery {
            sensor: s.key().to_owned(),
            from: T0,
            to: T0 + HOUR_MS,
            step_ms: step,
            fields: None,
        };
        match f.store.rollups(q).await {
            Err(StoreError::InvalidQuery(_)) => {}
            other => panic!("step {step}: expected InvalidQuery, got {other:?}"),
        }
    }
}

/// A batch with sequence numbers `first..first + readings.len()`.
fn numbered(series: &Series, readings: Vec<Reading>, first: u64) -> Batch {
    let hour = hour_start(readings[0].ts);
    let seqs = (first..first + readings.len() as u64).collect();
    Batch::numbered(series.clone(), hour, readings, seqs)
}

async fn marks(store: &dyn Store, keys: &[(&str, TimestampMs)]) -> Vec<u64> {
    marks_of(store, W, keys).await
}

async fn marks_of(store: &dyn Store, writer: WriterId, keys: &[(&str, TimestampMs)]) -> Vec<u64> {
    let keys: Vec<(String, TimestampMs)> = keys.iter().map(|(k, h)| (k.to_string(), *h)).collect();
    store.high_water(writer, &keys).await.expect("high_water")
}

/// Each (series, hour) remembers the highest sequence number written to it, across spills and
/// batches larger than a bucket; a batch without numbers, or with lower ones, never lowers it.
pub async fn high_water_marks_follow_writes(make: Make<'_>) {
    let f =
        make(BucketLimits { max_readings: 10, max_bytes: BucketLimits::MAX_BYTES_CEILING }).await;
    let (a, b) = (series("hw-a", "m", &[]), series("hw-b", "m", &[]));
    let ints = |from: i64, n: i64| -> Vec<Reading> {
        (0..n).map(|i| reading(from + i, &[("v", FieldValue::Int(i))])).collect()
    };
    assert_eq!(marks(&*f.store, &[("hw-a", T0), ("nobody", T0)]).await, vec![0, 0]);
    // 25 readings: more than two buckets' worth, so several statements for MongoDB.
    write_ok(&*f.store, &[numbered(&a, ints(T0, 25), 1_000), numbered(&b, ints(T0, 3), 50)]).await;
    write_ok(&*f.store, &[numbered(&a, ints(T0 + HOUR_MS, 2), 2_000)]).await;
    assert_eq!(
        marks(
            &*f.store,
            &[("hw-a", T0), ("hw-b", T0), ("hw-a", T0 + HOUR_MS), ("hw-b", T0 + HOUR_MS)]
        )
        .await,
        vec![1_024, 52, 2_001, 0]
    );
    write_ok(&*f.store, &batches(&a, &ints(T0 + 100, 3))).await;
    write_ok(&*f.store, &[numbered(&a, ints(T0 + 200, 1), 7)]).await;
    assert_eq!(marks(&*f.store, &[("hw-a", T0)]).await, vec![1_024]);
    assert_eq!(read(&*f.store, range(a.key(), T0, T0 + HOUR_MS)).await.len(), 29);
}

/// `Store::write`'s promise that the flusher and the WAL replay rely on: a failed batch leaves
/// behind exactly the readings up to its (series, hour) high-water mark, in order.
pub async fn a_failed_batch_leaves_the_prefix_its_mark_names(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 4, max_bytes: 1 << 20 }).await;
    let s = series("hw-prefix", "m", &[]);
    let huge: Vec<(FieldName, FieldValue)> = (0..256)
        .map(|i| (format!("f{i:03}").into(), FieldValue::Str("z".repeat(64 * 1024))))
        .collect();
    let mut readings: Vec<Reading> =
        (0..6).map(|i| reading(T0 + i, &[("v", FieldValue::Int(i))])).collect();
    readings.push(Reading { ts: T0 + 6, fields: huge.into() });
    readings.extend((7..12).map(|i| reading(T0 + i, &[("v", FieldValue::Int(i))])));
    if let Some(break_off) = &f.break_off {
        // No document limit to trip over: break the write off after 5 readings instead.
        readings[6] = reading(T0 + 6, &[("v", FieldValue::Int(6))]);
        break_off(5);
    }
    let batch = numbered(&s, readings.clone(), 100);
    let result = f.store.write(W, std::slice::from_ref(&batch)).await.remove(0);
    let mark = marks(&*f.store, &[(s.key(), T0)]).await[0];
    let landed = batch.seqs().partition_point(|&q| q <= mark);
    let stored = read(&*f.store, range(s.key(), T0, T0 + HOUR_MS)).await;
    assert_eq!(stored, readings[..landed].to_vec(), "a prefix, as long as the mark says");
    match result {
        Ok(_) => panic!("every store fails this batch, by its document limit or when told to"),
        Err(e) if f.break_off.is_some() => {
            assert!(e.is_retriable(), "a broken-off write is retried: {e}");
            assert_eq!(landed, 5, "the readings before the break landed");
        }
        Err(e) => {
            assert!(f.caps.rejects_oversized_reading, "unexpected failure: {e}");
            assert_eq!(landed, 6, "everything before the oversized reading landed");
        }
    }
    // The flusher's retry: the rest, from the mark on (less the reading MongoDB refused for
    // good), completes the hour exactly once.
    let (rest, rest_seqs): (Vec<Reading>, Vec<u64>) = readings[landed..]
        .iter()
        .cloned()
        .zip(batch.seqs()[landed..].iter().copied())
        .filter(|(r, _)| f.break_off.is_some() || r.ts != T0 + 6)
        .unzip();
    let rest = Batch::numbered(s.clone(), T0, rest, rest_seqs);
    write_ok(&*f.store, std::slice::from_ref(&rest)).await;
    let mut expected = readings[..landed].to_vec();
    expected.extend(rest.readings());
    assert_eq!(read(&*f.store, range(s.key(), T0, T0 + HOUR_MS)).await, expected);
    assert_eq!(marks(&*f.store, &[(s.key(), T0)]).await, vec![111]);
}

/// Two writers sharing a (series, hour), and even its buckets: each has its own mark, raised
/// only by its own writes, and neither's readings hide the other's. (Sequence numbers of
/// different processes are not comparable: a shared mark would let one writer's newer mark
/// cover the other's unwritten readings.)
pub async fn marks_are_kept_per_writer(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 10, max_bytes: 1 << 20 }).await;
    let s = series("hw-writers", "m", &[]);
    let (a, b) = (W, WriterId(0xb0b));
    let ints = |from: i64, n: i64| -> Vec<Reading> {
        (0..n).map(|i| reading(from + i, &[("v", FieldValue::Int(from - T0 + i))])).collect()
    };
    // B's numbers are far above A's, as a process started later (or on a faster clock) has.
    write_ok_as(&*f.store, a, &[numbered(&s, ints(T0, 4), 100)]).await;
    write_ok_as(&*f.store, b, &[numbered(&s, ints(T0 + 10, 3), 9_000_000)]).await;
    write_ok_as(&*f.store, a, &[numbered(&s, ints(T0 + 20, 12), 104)]).await;
    let key = s.key();
    assert_eq!(marks_of(&*f.store, a, &[(key, T0)]).await, vec![115]);
    assert_eq!(marks_of(&*f.store, b, &[(key, T0)]).await, vec![9_000_002]);
    assert_eq!(marks_of(&*f.store, WriterId(7), &[(key, T0)]).await, vec![0]);
    let keys = vec![(s.key().to_owned(), T0)];
    assert_eq!(f.store.schema1_high_water(&keys).await.expect("schema-1 marks"), vec![0]);
    let stored = read(&*f.store, range(key, T0, T0 + HOUR_MS)).await;
    let mut expected = ints(T0, 4);
    expected.extend(ints(T0 + 10, 3));
    expected.extend(ints(T0 + 20, 12));
    assert_eq!(stored, expected);
}

pub async fn write_ok_as(store: &dyn Store, writer: WriterId, batches: &[Batch]) {
    for (i, r) in store.write(writer, batches).await.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("batch {i} as writer {writer}: {e}"));
    }
}

/// Each field's first and last value of an hour come from the bucket statistics: the values
/// with the earliest and latest time, however the readings arrived (out of order within a
/// batch, the earliest in a later flush, across a spill into several buckets of the hour), and
/// of values at the same time, the smallest first and the largest last. The readings path
/// (steps finer than an hour) agrees.
pub async fn first_and_last_of_each_hour(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 3, max_bytes: 64 * 1024 }).await;
    let s = series("firstlast", "m", &[]);
    let v = |ts: TimestampMs, v: f64| reading(ts, &[("v", FieldValue::Float(v))]);
    let h1 = T0 + HOUR_MS;
    let h2 = T0 + 2 * HOUR_MS;
    let flushes: Vec<Vec<Reading>> = vec![
        // Hour 0, bucket 0: out of order; neither the hour's first nor its last yet.
        vec![v(T0 + 500, 5.0), v(T0 + 100, 1.0), v(T0 + 900, 9.0)],
        // Hour 0 spills: an earlier and a later reading arrive in a second bucket, with a
        // field the first bucket never saw (its first is not the hour's first reading).
        vec![
            v(T0 + 50, -2.0),
            reading(T0 + 700, &[("w", FieldValue::Int(70)), ("v", FieldValue::Float(7.5))]),
            v(T0 + 950, 7.0),
        ],
        // The hour's first and last points written again, in a third bucket: the later
        // values win; `w` gains an earlier value but keeps its last.
        vec![v(T0 + 50, -3.0), v(T0 + 950, 8.0), reading(T0 + 60, &[("w", FieldValue::UInt(6))])],
        // Hour 1: one reading, its own first and last.
        vec![v(h1 + 42, 4.25)],
        // Hour 2: one batch, out of order, spilling within the batch; the latest comes first
        // and the earliest last.
        vec![
            v(h2 + 3_000, 30.0),
            v(h2 + 2_000, 20.0),
            v(h2 + 1_500, 15.0),
            v(h2 + 2_500, 25.0),
            v(h2 + 1_000, 10.0),
        ],
        // A late reading for hour 0 in the same write as more of hour 2, with neither
        // extreme.
        vec![v(T0 + 600, 6.0), v(h2 + 2_200, 22.0)],
    ];
    let mut written = Vec::new();
    let mut created_in_hour0 = 0;
    for readings in &flushes {
        let batches = batches(&s, readings);
        let reports = write_ok(&*f.store, &batches).await;
        for (b, r) in batches.iter().zip(&reports) {
            if b.hour == T0 {
                created_in_hour0 += r.buckets_created;
            }
        }
        written.extend(readings.iter().cloned());
    }
    assert!(created_in_hour0 >= 3, "hour 0 spilled into {created_in_hour0} buckets");

    let (from, to) = (T0, T0 + 3 * HOUR_MS);
    let hours = rollups(&*f.store, s.key(), from, to, HOUR_MS, None).await;
    assert_eq!(hours, expected_rollups(&written, from, to, HOUR_MS, None));
    let points = |row: &RollupRow, name: &str| {
        let stats = &row.fields[name];
        (stats.first, stats.last)
    };
    assert_eq!(hours.iter().map(|r| r.start).collect::<Vec<_>>(), vec![T0, h1, h2]);
    assert_eq!(points(&hours[0], "v"), (Some((T0 + 50, -3.0)), Some((T0 + 950, 8.0))));
    assert_eq!(points(&hours[0], "w"), (Some((T0 + 60, 6.0)), Some((T0 + 700, 70.0))));
    assert_eq!(points(&hours[1], "v"), (Some((h1 + 42, 4.25)), Some((h1 + 42, 4.25))));
    assert_eq!(points(&hours[2], "v"), (Some((h2 + 1_000, 10.0)), Some((h2 + 3_000, 30.0))));

    // Steps of several hours merge the hours' statistics; one field alone is the same.
    let all = rollups(&*f.store, s.key(), from, to, 3 * HOUR_MS, None).await;
    assert_eq!(all, expected_rollups(&written, from, to, 3 * HOUR_MS, None));
    assert_eq!(points(&all[0], "v"), (Some((T0 + 50, -3.0)), Some((h2 + 3_000, 30.0))));
    let only_w = rollups(&*f.store, s.key(), from, to, HOUR_MS, Some(&["w"])).await;
    assert_eq!(only_w.len(), 1);
    assert_eq!(points(&only_w[0], "w"), points(&hours[0], "w"));

    // From the readings: finer steps, and whole hours over a range that cuts one.
    let fine = rollups(&*f.store, s.key(), from, to, 30 * MINUTE, None).await;
    assert_eq!(fine, expected_rollups(&written, from, to, 30 * MINUTE, None));
    let cut = rollups(&*f.store, s.key(), from, to - MINUTE, HOUR_MS, None).await;
    assert_eq!(cut, hours, "whole hours from the readings agree with the statistics");
}
