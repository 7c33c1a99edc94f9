//! The seal pass: what it moves, joins and leaves, and that reads do not change.

use super::*;

#[tokio::test]
async fn sealing_moves_hours_that_are_over_and_joins_their_chunks_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    let s = meta("s", "m", &[]);
    // Hour 0: a slow sensor's writes, joined into chunks of SMALL_CHUNK and more.
    let slow: Vec<Reading> = (0..300).map(|i| reading(i * 1000, i as f64)).collect();
    for part in slow.chunks(100) {
        write_ok(&store, &batches(&s, part)).await;
    }
    // Hour 1: out of order across writes, so its chunks are not in time order.
    let late: Vec<Reading> = (0..200).map(|i| reading(HOUR_MS + 50_000 + i, 1.0)).collect();
    let early: Vec<Reading> = (0..10).map(|i| reading(HOUR_MS + i, 2.0)).collect();
    write_ok(&store, &batches(&s, &late)).await;
    write_ok(&store, &batches(&s, &early)).await;
    // Hour 2: not over yet at `now`.
    write_ok(&store, &batches(&s, &[reading(2 * HOUR_MS, 3.0)])).await;
    let before = collect(&store, range("s", i64::MIN, i64::MAX)).await;
    assert!(chunk_counts(&store, "s", 0, 0).len() > 1);
    assert!(!headers(&store, "s")[1].2.sorted);

    let now = 3 * HOUR_MS + seal::SEAL_AFTER_MS - 1;
    let report = seal_all(&store, now, 2).await;
    assert_eq!((report.buckets, report.left), (2, 1), "{report:?}");
    assert_eq!(collect(&store, range("s", i64::MIN, i64::MAX)).await, before);
    let places = |hour| -> Vec<ChunkAt> {
        bucket_chunks(&store, "s", hour, 0).into_iter().map(|c| c.0).collect()
    };
    assert_eq!(chunk_counts(&store, "s", 0, 0), [300], "joined");
    assert!(places(0).iter().all(|at| at.write == BY_SERIES));
    assert_eq!(chunk_counts(&store, "s", HOUR_MS, 0), [200, 10], "moved as they were");
    assert!(places(HOUR_MS).iter().all(|at| at.write == BY_SERIES));
    assert!(places(2 * HOUR_MS).iter().all(|at| at.write != BY_SERIES), "hour 2 is not over");
    let again = seal_all(&store, now, 2).await;
    assert_eq!((again.buckets, again.chunks, again.left), (0, 0, 1), "nothing left to seal");

    // A late reading of a sealed hour lands by write and is sealed at the next pass.
    write_ok(&store, &batches(&s, &[reading(301_000, 9.0)])).await;
    assert_eq!(chunk_counts(&store, "s", 0, 0), [300, 1]);
    assert_ne!(places(0)[1].write, BY_SERIES);
    seal_all(&store, now, 2).await;
    assert_eq!(chunk_counts(&store, "s", 0, 0), [301]);
    let mut want = before;
    want.insert(300, reading(301_000, 9.0));
    assert_eq!(collect(&store, range("s", i64::MIN, i64::MAX)).await, want);
    // A small sealed chunk is joined where it is.
    write_ok(&store, &batches(&s, &[reading(2 * HOUR_MS + 1, 4.0)])).await;
    seal_all(&store, 4 * HOUR_MS, 2).await;
    write_ok(&store, &batches(&s, &[reading(2 * HOUR_MS + 2, 5.0)])).await;
    assert_eq!(chunk_counts(&store, "s", 2 * HOUR_MS, 0), [3]);
    assert!(places(2 * HOUR_MS).iter().all(|at| at.write == BY_SERIES));
}
