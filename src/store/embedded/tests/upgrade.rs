//! Files written by earlier schemas: opened, read, written to and upgraded in place.

use super::*;

fn schema_version(store: &EmbeddedStore) -> u64 {
    let txn = store.db().begin_read().unwrap();
    txn.open_table(META).unwrap().get(META_SCHEMA_VERSION).unwrap().unwrap().value()
}

/// The sensor's readings in `[from, to)` are `written`, read in either order.
async fn assert_reads_both_ways(
    store: &EmbeddedStore,
    sensor: &str,
    (from, to): (TimestampMs, TimestampMs),
    written: &[Reading],
) {
    assert_eq!(collect(store, range(sensor, from, to)).await, written);
    let mut desc = written.to_vec();
    desc.reverse();
    let got = collect(store, RangeQuery { order: Order::Desc, ..range(sensor, from, to) }).await;
    assert_eq!(got, desc);
}

/// A chunk as schemas 1 to 5 encoded it.
fn in_chunk_encoding_1(bytes: &[u8], hour: TimestampMs) -> Vec<u8> {
    let mut readings = Vec::new();
    codec::decode_chunk(bytes, hour, &mut readings).unwrap();
    let old = codec::encode_v1(hour, &readings);
    assert_eq!(old[0], 1, "chunk encoding 1");
    old
}

/// Makes the file in `dir` one that schema 5 wrote: every chunk in chunk encoding 1.
fn as_schema5_file(dir: &std::path::Path) {
    let db = redb::Database::create(dir.join(DB_FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let buckets = txn.open_table(BUCKETS).unwrap();
        let mut stored = chunks::open_write(&txn).unwrap();
        for e in buckets.iter().unwrap() {
            let (k, v) = e.unwrap();
            let (id, hour, seq) = k.value();
            let header = BucketHeader::decode(v.value()).unwrap();
            for at in chunks::of_bucket(id, hour, seq, &header.writes) {
                let bytes = stored.get(at).unwrap().unwrap().value().to_vec();
                stored.insert(at, &in_chunk_encoding_1(&bytes, hour)).unwrap();
            }
        }
        txn.open_table(META).unwrap().insert(META_SCHEMA_VERSION, 5).unwrap();
    }
    txn.commit().unwrap();
}

/// A file schema 5 wrote (chunks in encoding 1) opens, is marked schema 6, and reads. A write
/// into one of its buckets appends a chunk in encoding 2 beside the old ones, and a small old
/// chunk that a write joins is encoded again in encoding 2; both read back in order.
#[tokio::test]
async fn a_schema5_files_chunks_read_beside_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let s = meta("five", "m", &[]);
    let all: Vec<Reading> = (0..700)
        .map(|i| {
            let mut r = reading(i * 1000, f64::from(i as i32 % 97) / 10.0);
            r.fields.push(("n".into(), FieldValue::Int(i)));
            r
        })
        .collect();
    {
        let store = open(dir.path(), BIG);
        write_ok(&store, &batches(&s, &all[..300])).await;
        write_ok(&store, &batches(&s, &all[300..600])).await;
        write_ok(&store, &batches(&s, &[reading(HOUR_MS, -1.5)])).await;
    }
    as_schema5_file(dir.path());

    let store = open(dir.path(), BIG);
    assert_eq!(schema_version(&store), super::FILE_SCHEMA_VERSION, "upgraded at open");
    assert_eq!(collect(&store, range("five", 0, HOUR_MS)).await, all[..600]);
    write_ok(&store, &batches(&s, &all[600..])).await;
    write_ok(&store, &batches(&s, &[reading(HOUR_MS + 1, 2.25)])).await;

    let encodings = |hour| -> Vec<u8> {
        bucket_chunks(&store, "five", hour, 0).iter().map(|(_, bytes)| bytes[0]).collect()
    };
    assert_eq!(encodings(0), [1, 1, 2], "old chunks stay, the new one in encoding 2");
    assert_eq!(encodings(HOUR_MS), [2], "the small old chunk joined, encoded again");
    assert_reads_both_ways(&store, "five", (0, HOUR_MS), &all).await;
    assert_eq!(
        collect(&store, range("five", HOUR_MS, 2 * HOUR_MS)).await,
        [reading(HOUR_MS, -1.5), reading(HOUR_MS + 1, 2.25)]
    );
}

/// Makes the file in `dir` one that schema `schema` (below 5) wrote: every chunk in the table
/// keyed by series and in chunk encoding 1, every header in `encode`'s version, no write
/// numbers.
fn as_legacy_file(dir: &std::path::Path, schema: u64, encode: fn(&BucketHeader) -> Vec<u8>) {
    let db = redb::Database::create(dir.join(DB_FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut buckets = txn.open_table(BUCKETS).unwrap();
        let mut stored = chunks::open_write(&txn).unwrap();
        let all: Vec<_> = buckets
            .iter()
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.value(), BucketHeader::decode(v.value()).unwrap())
            })
            .collect();
        for ((id, hour, seq), mut header) in all {
            let places: Vec<ChunkAt> = chunks::of_bucket(id, hour, seq, &header.writes).collect();
            for at in places {
                let bytes = stored.get(at).unwrap().unwrap().value().to_vec();
                stored.remove(at).unwrap();
                let old = in_chunk_encoding_1(&bytes, hour);
                stored.insert(ChunkAt { write: BY_SERIES, ..at }, &old).unwrap();
            }
            header.writes.fill(BY_SERIES);
            buckets.insert((id, hour, seq), encode(&header).as_slice()).unwrap();
        }
        let mut meta = txn.open_table(META).unwrap();
        meta.insert(META_SCHEMA_VERSION, schema).unwrap();
        meta.remove(META_NEXT_WRITE).unwrap();
    }
    txn.delete_table(chunks::CHUNKS).unwrap();
    txn.commit().unwrap();
}

/// A file schema 4 wrote (chunks keyed by series, headers of version 2) opens, is upgraded,
/// and reads. A write into one of its buckets appends its chunk keyed by write beside the old
/// ones, and joins a small old chunk where it is; the retention pass deletes both kinds.
#[tokio::test]
async fn a_schema4_files_buckets_read_take_new_chunks_and_expire() {
    let dir = tempfile::tempdir().unwrap();
    let s = meta("old", "m", &[]);
    let all: Vec<Reading> = (0..900).map(|i| reading(i * 1000, i as f64)).collect();
    {
        let store = open(dir.path(), BIG);
        // Two chunks in hour 0; a small one in hour 1.
        write_ok(&store, &batches(&s, &all[..300])).await;
        write_ok(&store, &batches(&s, &all[300..600])).await;
        write_ok(&store, &batches(&s, &[reading(HOUR_MS, -1.0)])).await;
    }
    as_legacy_file(dir.path(), 4, BucketHeader::encode_version_2);

    let store = open(dir.path(), BIG);
    let mut written = all[..600].to_vec();
    assert_eq!(collect(&store, range("old", 0, HOUR_MS)).await, written);
    write_ok(&store, &batches(&s, &all[600..])).await;
    write_ok(&store, &batches(&s, &[reading(HOUR_MS + 1, -2.0)])).await;
    written.extend_from_slice(&all[600..]);

    let hour_0: Vec<ChunkAt> =
        bucket_chunks(&store, "old", 0, 0).into_iter().map(|c| c.0).collect();
    let writes: Vec<bool> = hour_0.iter().map(|at| at.write == BY_SERIES).collect();
    assert_eq!(writes, [true, true, false], "{hour_0:?}");
    let hour_1 = bucket_chunks(&store, "old", HOUR_MS, 0);
    assert_eq!(hour_1.len(), 1, "the small old chunk took the new reading");
    assert_eq!(hour_1[0].0.write, BY_SERIES);
    assert_reads_both_ways(&store, "old", (0, HOUR_MS), &written).await;
    assert_eq!(
        collect(&store, range("old", HOUR_MS, 2 * HOUR_MS)).await,
        [reading(HOUR_MS, -1.0), reading(HOUR_MS + 1, -2.0)]
    );

    let policy = Retention { raw: Some(Duration::from_secs(3600)), rollups: None };
    let report = store.expire(3 * HOUR_MS, policy, 1000).await.unwrap();
    assert!(report.done, "{report:?}");
    assert_eq!(report.readings_deleted, 902);
    let txn = store.db().begin_read().unwrap();
    let left = chunks::open_read(&txn).unwrap();
    assert_eq!(left.by_series.len().unwrap(), 0, "old chunks deleted");
    assert_eq!(left.by_write.len().unwrap(), 0, "new chunks deleted");
}

/// A file schema 2 wrote (bucket headers of version 1, without first/last) opens, is marked
/// schema 3, and reads: hour rollups from its buckets have no first/last (`None`), rollups from
/// the readings do. The next write into such a bucket counts its statistics again from its
/// chunks, so from then on the bucket answers them.
#[tokio::test]
async fn a_schema2_file_reads_and_its_written_buckets_gain_first_and_last() {
    let dir = tempfile::tempdir().unwrap();
    let s = meta("old", "m", &[]);
    let h1 = HOUR_MS;
    let limits = BucketLimits { max_readings: 3, max_bytes: 1 << 20 };
    let mut written =
        vec![reading(500, 5.0), reading(100, 1.0), reading(900, 9.0), reading(h1 + 10, 4.0)];
    {
        let store = open(dir.path(), limits);
        write_ok(&store, &batches(&s, &written)).await;
        let spilled = [reading(50, -2.0), reading(950, 7.0)];
        write_ok(&store, &batches(&s, &spilled)).await;
        written.extend(spilled);
        assert_eq!(headers(&store, "old").len(), 3, "hour 0 has two buckets");
    }
    // Make it the file schema 2 would have written: version-1 headers, schema_version 2.
    as_legacy_file(dir.path(), 2, BucketHeader::encode_version_1);

    let store = open(dir.path(), limits);
    assert_eq!(schema_version(&store), super::FILE_SCHEMA_VERSION, "upgraded at open");
    assert!(headers(&store, "old").iter().all(|(_, _, h)| h.lacks_first_last()));
    let rollup = |from: TimestampMs, to: TimestampMs, step_ms: i64| {
        let q = RollupQuery { sensor: "old".into(), from, to, step_ms, fields: None };
        let store = &store;
        async move { store.rollups(q).await.unwrap() }
    };
    let hours = rollup(0, 2 * HOUR_MS, HOUR_MS).await;
    assert_eq!(hours.len(), 2);
    for row in &hours {
        let (v, want) = (&row.fields["v"], &model_rollup(&written, &q(HOUR_MS))[&row.start]["v"]);
        assert_eq!((v.count, v.min, v.max, v.sum), (want.count, want.min, want.max, want.sum));
        assert_eq!((v.first, v.last), (None, None), "hour {}", row.start);
    }
    // The readings path knows them.
    let fine = rollup(0, 2 * HOUR_MS, 30 * 60_000).await;
    assert_rollups_match(&fine, &model_rollup(&written, &q(30 * 60_000)));
    assert_eq!(fine[0].fields["v"].first, Some((50, -2.0)));

    // Writing into hour 0's open bucket and hour 1's: both are counted again.
    let more = [reading(20, 3.0), reading(h1 + 5, 2.0)];
    write_ok(&store, &batches(&s, &more)).await;
    written.extend(more);
    let after = headers(&store, "old");
    assert_eq!(after.len(), 3, "no new bucket");
    assert!(after[0].2.lacks_first_last(), "a bucket not written to stays as it was");
    assert_eq!(after[1].2.stats["v"].first, Some((20, 3.0)));
    assert_eq!(after[1].2.stats["v"].last, Some((950, 7.0)));
    assert_eq!(after[1].2.stats["v"].count, 3);
    let hours = rollup(0, 2 * HOUR_MS, HOUR_MS).await;
    assert_eq!((hours[0].fields["v"].first, hours[0].fields["v"].count), (None, 6));
    assert_rollups_match(&hours[1..], &model_rollup(&written[..], &q(HOUR_MS)).split_off(&h1));
    assert_eq!(hours[1].fields["v"].first, Some((h1 + 5, 2.0)));
    assert_eq!(hours[1].fields["v"].last, Some((h1 + 10, 4.0)));

    fn q(step_ms: i64) -> RollupQuery {
        RollupQuery { sensor: "old".into(), from: 0, to: 2 * HOUR_MS, step_ms, fields: None }
    }
}
