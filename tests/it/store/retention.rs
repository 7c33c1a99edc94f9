//! Retention cases of the Store suite ([`super::suite::store_suite`] runs them for every
//! store): raw readings of hours past `--retention` are deleted, their hour statistics stay
//! exact until `--rollup-retention`, and a query needing deleted readings says so.

use std::time::Duration;

use bucketd::model::{FieldValue, HOUR_MS, Reading, TimestampMs};
use bucketd::store::{ExpireReport, Retention, Store, StoreError};
use futures::StreamExt;

use super::suite::{
    MINUTE, Make, T0, batches, expected_range, expected_rollups, range, read, reading, rollups,
    series, write_ok,
};
use bucketd::store::{BucketLimits, RollupQuery};

/// Runs retention steps at `now` until the pass is done: a step's budget of one bucket
/// makes the embedded store's pass take many bounded transactions.
pub async fn expire_all(store: &dyn Store, now: TimestampMs, policy: Retention) -> ExpireReport {
    let mut total = ExpireReport::default();
    // Bounded: every step of a pass moves at least one bucket or series, and the cases
    // write far fewer than this.
    for _ in 0..10_000 {
        let step = store.expire(now, policy, 1).await.expect("retention step");
        total.hours_deleted += step.hours_deleted;
        total.readings_deleted += step.readings_deleted;
        total.stats_deleted += step.stats_deleted;
        if step.done {
            total.done = true;
            return total;
        }
    }
    panic!("the retention pass did not finish in 10,000 steps");
}

/// The first item of a range query: the error it must fail with.
async fn range_error(
    store: &dyn Store,
    sensor: &str,
    from: TimestampMs,
    to: TimestampMs,
) -> StoreError {
    let mut stream = store.readings(range(sensor, from, to));
    match stream.next().await {
        Some(Err(e)) => e,
        other => panic!("[{from}, {to}) should fail as expired, got {other:?}"),
    }
}

fn hours(h: u64) -> Duration {
    Duration::from_secs(h * 3600)
}

/// Five hours of readings, spilled (3 per bucket), with an int field and string-only readings.
fn five_hours() -> Vec<Reading> {
    let mut out = Vec::new();
    for h in 0..5i64 {
        for i in 0..7i64 {
            let ts = T0 + h * HOUR_MS + i * 7 * MINUTE + h;
            // Out of order within the hour, so first/last are not the first/last written.
            let ts = if i == 3 { ts - 21 * MINUTE + 1 } else { ts };
            out.push(reading(
                ts,
                &[
                    ("v", FieldValue::Float((h * 10 + i) as f64 * 0.25 - 3.0)),
                    ("n", FieldValue::Int(h * 100 - i)),
                ],
            ));
        }
        out.push(reading(T0 + h * HOUR_MS + 59 * MINUTE, &[("s", FieldValue::Str("x".into()))]));
    }
    out
}

pub async fn expired_hours_keep_exact_statistics(make: Make<'_>) {
    let f = make(BucketLimits { max_readings: 3, max_bytes: 64 * 1024 }).await;
    if !f.caps.retention_pass {
        return;
    }
    let store = &*f.store;
    let s = series("ret", "m", &[("site", "a")]);
    let mut written = five_hours();
    write_ok(store, &batches(&s, &written)).await;

    // 3 h retention at 5.5 h: hours 0 and 1 ended more than 3 h ago, hour 2 did not.
    let policy = Retention { raw: Some(hours(3)), rollups: None };
    let now = T0 + 5 * HOUR_MS + 30 * MINUTE;
    let report = expire_all(store, now, policy).await;
    assert_eq!(report.hours_deleted, 2, "{report:?}");
    let old = written.iter().filter(|r| r.ts < T0 + 2 * HOUR_MS).count() as u64;
    assert_eq!(report.readings_deleted, old, "{report:?}");
    assert_eq!(
        expire_all(store, now, policy).await,
        ExpireReport { done: true, ..Default::default() }
    );

    // Readings of the expired hours are gone, and a range touching them says so.
    let e = range_error(store, s.key(), T0, T0 + 5 * HOUR_MS).await;
    assert!(matches!(e, StoreError::Expired { before, .. } if before == T0 + 2 * HOUR_MS), "{e:?}");
    let message = e.to_string();
    assert!(
        message.contains("the retention of 3h") && message.contains("2024-01-01T02:00:00.000Z"),
        "{message}"
    );
    assert!(
        matches!(range_error(store, s.key(), T0 + 30 * MINUTE, T0 + 31 * MINUTE).await, StoreError::Expired { before, .. } if before == T0 + HOUR_MS)
    );
    // Live hours answer as before.
    let (live, end) = (T0 + 2 * HOUR_MS, T0 + 5 * HOUR_MS);
    assert_eq!(read(store, range(s.key(), live, end)).await, expected_range(&written, live, end));
    assert!(store.sensor_exists(s.key()).await.unwrap());

    // Whole-hour rollups over expired and live hours are exact: count, min, max, sum,
    // first, last of every numeric field.
    for step in [HOUR_MS, 2 * HOUR_MS, 5 * HOUR_MS] {
        let got = rollups(store, s.key(), T0, end, step, None).await;
        assert_eq!(got, expected_rollups(&written, T0, end, step, None), "step {step}");
    }
    assert_eq!(
        rollups(store, s.key(), T0, end, HOUR_MS, Some(&["n"])).await,
        expected_rollups(&written, T0, end, HOUR_MS, Some(&["n"]))
    );
    // Finer steps need the readings: a clear error, not a partial answer.
    let fine = RollupQuery {
        sensor: s.key().to_owned(),
        from: T0,
        to: end,
        step_ms: 30 * MINUTE,
        fields: None,
    };
    assert!(matches!(store.rollups(fine).await, Err(StoreError::Expired { .. })));

    // A late reading of an expired hour is written, then expired again: the hour's
    // statistics include it, once. (A point the hour held is no longer known once its
    // readings are deleted: written again, it would be counted again.)
    let late = vec![reading(T0 + HOUR_MS + 5, &[("v", FieldValue::Float(100.0))])];
    write_ok(store, &batches(&s, &late)).await;
    written.extend(late);
    let again = expire_all(store, now, policy).await;
    // (MongoDB counts the hour again: it sees its last bucket go.)
    assert!(again.readings_deleted == 1 && again.hours_deleted <= 1, "{again:?}");
    assert_eq!(
        rollups(store, s.key(), T0, end, HOUR_MS, None).await,
        expected_rollups(&written, T0, end, HOUR_MS, None)
    );

    // An hour later with a 5 h rollup retention: hour 0's statistics go (it ended 5.5 h
    // before; hour 1 only 4.5 h), and hour 2's readings (3.5 h).
    let later = Retention { raw: Some(hours(3)), rollups: Some(hours(5)) };
    let report = expire_all(store, now + HOUR_MS, later).await;
    // MongoDB keeps a day's hours in one document, deleted once the whole day is past.
    let (stats_gone, kept_from) =
        if f.caps.rollup_retention_by_day { (0, T0) } else { (1, T0 + HOUR_MS) };
    assert_eq!((report.hours_deleted, report.stats_deleted), (1, stats_gone), "{report:?}");
    assert_eq!(
        rollups(store, s.key(), T0, end, HOUR_MS, None).await,
        expected_rollups(&written, kept_from, end, HOUR_MS, None)
    );
    let (live, end) = (T0 + 3 * HOUR_MS, T0 + 5 * HOUR_MS);
    assert_eq!(read(store, range(s.key(), live, end)).await, expected_range(&written, live, end));
}

pub async fn retention_is_per_hour_and_spares_other_series(make: Make<'_>) {
    let f = make(BucketLimits::default()).await;
    if !f.caps.retention_pass {
        return;
    }
    let store = &*f.store;
    let (a, b) = (series("a", "m", &[]), series("b", "m", &[]));
    let old: Vec<Reading> =
        (0..10).map(|i| reading(T0 + i * MINUTE, &[("v", FieldValue::Int(i))])).collect();
    let new: Vec<Reading> =
        (0..10).map(|i| reading(T0 + HOUR_MS + i * MINUTE, &[("v", FieldValue::Int(i))])).collect();
    write_ok(store, &batches(&a, &old)).await;
    write_ok(store, &batches(&b, &new)).await;
    // The hour T0 ended exactly `raw` before `now`: it goes; T0 + 1 h has not ended as long.
    let policy = Retention { raw: Some(hours(1)), rollups: None };
    let report = expire_all(store, T0 + 2 * HOUR_MS, policy).await;
    assert_eq!((report.hours_deleted, report.readings_deleted), (1, 10), "{report:?}");
    assert_eq!(
        read(store, range("b", T0, T0 + 2 * HOUR_MS)).await,
        expected_range(&new, T0, T0 + 2 * HOUR_MS)
    );
    // No raw retention at all: nothing happens.
    let none = expire_all(store, T0 + 100 * HOUR_MS, Retention::default()).await;
    assert_eq!(none, ExpireReport { done: true, ..Default::default() });
}

/// `expire_keys` at one database's own retention deletes its old hours only: the same series
/// in the default database and in a database whose name extends it keep theirs, and a query
/// of the deleted hour fails as expired while whole-hour rollups still answer.
pub async fn a_databases_own_retention_spares_the_others(make: Make<'_>) {
    use bucketd::databases::Database;
    let f = make(BucketLimits::default()).await;
    if !f.caps.retention_pass {
        return;
    }
    let store = &*f.store;
    let short = Database::named("short").unwrap();
    let keys: Vec<String> =
        [Database::default(), short.clone(), Database::named("shorter").unwrap()]
            .iter()
            .map(|db| db.qualify("m,s=a"))
            .collect();
    let old: Vec<Reading> =
        (0..10).map(|i| reading(T0 + i * MINUTE, &[("v", FieldValue::Int(i))])).collect();
    for key in &keys {
        write_ok(store, &batches(&series(key, "m", &[("s", "a")]), &old)).await;
    }
    let range_keys = short.key_range().expect("a named database has a key range");
    let mut deleted = 0;
    for _ in 0..10_000 {
        let step = store
            .expire_keys(T0 + 2 * HOUR_MS, hours(1), range_keys.clone(), 1)
            .await
            .expect("retention step");
        deleted += step.readings_deleted;
        if step.done {
            break;
        }
    }
    assert_eq!(deleted, 10);
    for key in [&keys[0], &keys[2]] {
        assert_eq!(read(store, range(key, T0, T0 + HOUR_MS)).await, old, "{key:?} keeps its hour");
    }
    range_error(store, &keys[1], T0, T0 + HOUR_MS).await;
    let whole = rollups(store, &keys[1], T0, T0 + HOUR_MS, HOUR_MS, None).await;
    assert_eq!(whole, expected_rollups(&old, T0, T0 + HOUR_MS, HOUR_MS, None));
}
