//! The rows of a readings page, in page order: the store's runs merged with the readings not
//! yet flushed, after the readings a cursor says were already returned. A stored row is
//! written where the store's decoder left it ([`ColumnsReader`]); a `Reading` is made only for
//! a page that collects its rows (CSV).
//!
//! Ties between the store and the buffers follow [`super::merge`]'s rule.

use std::iter::Peekable;
use std::task::{Context, Poll, ready};

use futures::stream::{BoxStream, StreamExt};

use super::encode::{
    TsWriter, write_json_key, write_json_object, write_json_row, write_json_value,
};
use super::merge::{Next, next};
use crate::model::{ColumnsReader, Reading, TimestampMs};
use crate::store::{Order, Run, StoreError};

pub(super) type Runs = BoxStream<'static, Result<Run, StoreError>>;

pub(super) struct Source {
    /// `None` once it has ended, failed or been closed.
    runs: Option<Runs>,
    run: Current,
    unflushed: Peekable<std::vec::IntoIter<Reading>>,
    order: Order,
    /// `(t, k)`: the next `k` rows at time `t` are skipped, if they come first.
    skip: Option<(TimestampMs, u64)>,
    /// Where the row [`Source::poll_row`] found is.
    at: Option<Side>,
}

#[derive(Clone, Copy, Debug)]
enum Side {
    Stored,
    Unflushed,
    /// One point, stored and unflushed: [`super::merge`]'s rule.
    Both,
}

/// The store's run being read.
enum Current {
    None,
    Readings(Peekable<std::vec::IntoIter<Reading>>),
    Columns {
        reader: ColumnsReader,
        /// Per column, its name as a JSON object key: `"name":`.
        keys: Vec<Vec<u8>>,
    },
}

impl Current {
    fn new(run: Run, order: Order) -> Current {
        match run {
            Run::Readings(r) => Current::Readings(r.into_iter().peekable()),
            Run::Columns(c) => {
                let reader = ColumnsReader::new(c, order == Order::Desc);
                let keys = reader
                    .names()
                    .iter()
                    .map(|n| {
                        let mut key = Vec::new();
                        write_json_key(&mut key, n);
                        key
                    })
                    .collect();
                Current::Columns { reader, keys }
            }
        }
    }

    fn peek_ts(&mut self) -> Option<TimestampMs> {
        match self {
            Current::None => None,
            Current::Readings(r) => r.peek().map(|r| r.ts),
            Current::Columns { reader, .. } => reader.peek_ts(),
        }
    }
}

impl Source {
    /// `unflushed` must be in page order, arrival order for ties (the buffers give them
    /// ascending; a descending page reverses them).
    pub(super) fn new(
        runs: Runs,
        unflushed: Vec<Reading>,
        order: Order,
        skip: Option<(TimestampMs, u64)>,
    ) -> Source {
        Source {
            runs: Some(runs),
            run: Current::None,
            unflushed: unflushed.into_iter().peekable(),
            order,
            skip,
            at: None,
        }
    }

    /// Finds the page's next row and returns its timestamp; [`Source::write_json`] or
    /// [`Source::take`] then moves past it. The first error of the store ends the rows.
    pub(super) fn poll_row(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<TimestampMs, StoreError>>> {
        loop {
            let stored = loop {
                if let Some(ts) = self.run.peek_ts() {
                    break Some(ts);
                }
                let Some(runs) = self.runs.as_mut() else { break None };
                match ready!(runs.poll_next_unpin(cx)) {
                    Some(Ok(run)) => self.run = Current::new(run, self.order),
                    Some(Err(e)) => {
                        self.close();
                        self.unflushed = Vec::new().into_iter().peekable();
                        return Poll::Ready(Some(Err(e)));
                    }
                    None => self.runs = None,
                }
            };
            let unflushed = self.unflushed.peek().map(|r| r.ts);
            let (side, ts) = match (stored, unflushed) {
                (Some(s), Some(u)) => match next(self.order, u, s) {
                    Next::Unflushed => (Side::Unflushed, u),
                    Next::Stored => (Side::Stored, s),
                    Next::Both => (Side::Both, s),
                },
                (Some(s), None) => (Side::Stored, s),
                (None, Some(u)) => (Side::Unflushed, u),
                (None, None) => return Poll::Ready(None),
            };
            self.at = Some(side);
            if let Some((t, left)) = &mut self.skip {
                if *left > 0 && ts == *t {
                    *left -= 1;
                    self.pass();
                    continue;
                }
                self.skip = None;
            }
            return Poll::Ready(Some(Ok(ts)));
        }
    }

    /// Writes the row found as a JSON object and moves past it.
    pub(super) fn write_json(&mut self, buf: &mut Vec<u8>, ts: &mut TsWriter) {
        match self.at.take().expect("a row was found") {
            Side::Unflushed => {
                write_json_row(buf, ts, &self.unflushed.next().expect("found"));
            }
            Side::Both => {
                self.at = Some(Side::Both);
                let point = self.take();
                write_json_row(buf, ts, &point);
            }
            Side::Stored => match &mut self.run {
                Current::None => unreachable!("a stored row was found"),
                Current::Readings(r) => write_json_row(buf, ts, &r.next().expect("found")),
                Current::Columns { reader, keys } => {
                    let t = reader.advance().expect("found");
                    let shape = reader.shape();
                    write_json_object(buf, ts, t, shape.len(), |buf, i| {
                        buf.extend_from_slice(&keys[shape[i]]);
                        write_json_value(buf, reader.value(shape[i]));
                    });
                }
            },
        }
    }

    /// The row found, as a reading; moves past it.
    pub(super) fn take(&mut self) -> Reading {
        let found = match self.at.take().expect("a row was found") {
            Side::Unflushed => self.unflushed.next(),
            Side::Both => {
                self.at = Some(Side::Stored);
                let mut stored = self.take();
                stored.overlay(&self.unflushed.next().expect("found"));
                Some(stored)
            }
            Side::Stored => match &mut self.run {
                Current::None => None,
                Current::Readings(r) => r.next(),
                Current::Columns { reader, .. } => reader.next_reading(),
            },
        };
        found.expect("a row was found")
    }

    /// Moves past the row found without reading it.
    fn pass(&mut self) {
        match self.at.take().expect("a row was found") {
            Side::Unflushed => drop(self.unflushed.next()),
            Side::Both => {
                drop(self.unflushed.next());
                self.at = Some(Side::Stored);
                self.pass();
            }
            Side::Stored => match &mut self.run {
                Current::None => {}
                Current::Readings(r) => drop(r.next()),
                Current::Columns { reader, .. } => drop(reader.advance()),
            },
        }
    }

    /// Drops the store's stream, which stops its reader, rather than waiting for the drop.
    pub(super) fn close(&mut self) {
        self.runs = None;
        self.run = Current::None;
    }
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use proptest::prelude::*;

    use super::*;
    use crate::model::{Columns, FieldName, FieldValue};

    fn r(ts: i64, tag: &str) -> Reading {
        Reading { ts, fields: smallvec::smallvec![(FieldName::from(tag), FieldValue::Int(ts))] }
    }

    fn label(r: &Reading) -> (i64, String) {
        (r.ts, r.fields[0].0.to_string())
    }

    /// The store's readings as runs of `split` readings, alternately as readings and columns.
    fn runs(store: Vec<Result<Reading, StoreError>>, order: Order, split: usize) -> Runs {
        let mut out = Vec::new();
        let mut pending: Vec<Reading> = Vec::new();
        let flush = |pending: &mut Vec<Reading>, out: &mut Vec<Result<Run, StoreError>>| {
            if pending.is_empty() {
                return;
            }
            let readings = std::mem::take(pending);
            if out.len().is_multiple_of(2) {
                out.push(Ok(Run::Readings(readings)));
            } else {
                out.push(Ok(Run::Columns(columns(readings, order))));
            }
        };
        for item in store {
            match item {
                Ok(r) => {
                    pending.push(r);
                    if pending.len() == split {
                        flush(&mut pending, &mut out);
                    }
                }
                Err(e) => {
                    flush(&mut pending, &mut out);
                    out.push(Err(e));
                }
            }
        }
        flush(&mut pending, &mut out);
        stream::iter(out).boxed()
    }

    /// Readings in page order, as ascending columns.
    fn columns(mut readings: Vec<Reading>, order: Order) -> Columns {
        if order == Order::Desc {
            readings.reverse();
        }
        Columns::from_readings(&readings)
    }

    async fn rows(mut source: Source) -> Vec<Result<(i64, String), String>> {
        let mut out = Vec::new();
        while let Some(row) = std::future::poll_fn(|cx| source.poll_row(cx)).await {
            match row {
                Ok(_) => out.push(Ok(label(&source.take()))),
                Err(e) => out.push(Err(e.to_string())),
            }
        }
        out
    }

    async fn run(
        store: Vec<Reading>,
        mut unflushed: Vec<Reading>,
        order: Order,
        skip: Option<(i64, u64)>,
    ) -> Vec<(i64, String)> {
        if order == Order::Desc {
            unflushed.reverse();
        }
        let mut all = Vec::new();
        for split in [1, 2, 100] {
            let store = runs(store.iter().cloned().map(Ok).collect(), order, split);
            let got = rows(Source::new(store, unflushed.clone(), order, skip)).await;
            all.push(got.into_iter().map(Result::unwrap).collect::<Vec<_>>());
        }
        assert!(all.windows(2).all(|w| w[0] == w[1]), "the runs' sizes change nothing: {all:?}");
        all.pop().unwrap()
    }

    fn labels(v: &[(i64, &str)]) -> Vec<(i64, String)> {
        v.iter().map(|&(t, s)| (t, s.to_owned())).collect()
    }

    #[tokio::test]
    async fn a_stored_and_an_unflushed_reading_of_one_time_are_one_row() {
        let store = vec![r(1, "s"), r(3, "s"), r(5, "s")];
        let unflushed = vec![r(0, "u"), r(3, "u"), r(4, "u"), r(6, "u")];
        let got = run(store, unflushed, Order::Asc, None).await;
        assert_eq!(got, labels(&[(0, "u"), (1, "s"), (3, "s"), (4, "u"), (5, "s"), (6, "u")]));
        let mut stored = r(3, "a");
        stored.fields.push(("b".into(), FieldValue::Int(1)));
        let mut later = r(3, "b");
        later.fields[0].1 = FieldValue::Int(7);
        let runs = runs(vec![Ok(stored)], Order::Asc, 1);
        let mut source = Source::new(runs, vec![later], Order::Asc, None);
        let point = futures::executor::block_on(async {
            futures::future::poll_fn(|cx| source.poll_row(cx)).await.unwrap().unwrap();
            source.take()
        });
        let fields: Vec<_> = point.fields.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        assert_eq!(
            fields,
            vec![("a".to_owned(), FieldValue::Int(3)), ("b".to_owned(), FieldValue::Int(7))]
        );
    }

    #[tokio::test]
    async fn descending_is_the_mirror_of_ascending() {
        let store = vec![r(1, "s"), r(3, "s"), r(5, "s")];
        let unflushed = vec![r(0, "u"), r(3, "u"), r(4, "u"), r(6, "u")];
        let mut asc = run(store.clone(), unflushed.clone(), Order::Asc, None).await;
        let mut store_desc = store;
        store_desc.reverse();
        let desc = run(store_desc, unflushed, Order::Desc, None).await;
        asc.reverse();
        assert_eq!(desc, asc);
    }

    #[tokio::test]
    async fn a_cursor_skips_its_readings_only_where_the_page_starts() {
        let store = vec![r(3, "s"), r(5, "s")];
        let unflushed = vec![r(3, "u"), r(4, "u")];
        // The point at 3 was returned.
        let got = run(store.clone(), unflushed.clone(), Order::Asc, Some((3, 1))).await;
        assert_eq!(got, labels(&[(4, "u"), (5, "s")]));
        // A skip that does not match the first row skips nothing.
        let got = run(store, unflushed, Order::Asc, Some((4, 1))).await;
        assert_eq!(got.len(), 3);
    }

    #[tokio::test]
    async fn a_store_error_ends_the_rows() {
        let store = vec![Ok(r(1, "s")), Err(StoreError::Unavailable("down".into())), Ok(r(9, "s"))];
        let source = Source::new(runs(store, Order::Asc, 100), vec![r(5, "u")], Order::Asc, None);
        let got = rows(source).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], Ok((1, "s".to_owned())));
        assert!(got[1].as_ref().unwrap_err().contains("down"), "{got:?}");
    }

    fn value() -> impl Strategy<Value = FieldValue> {
        prop_oneof![
            proptest::num::f64::ANY.prop_map(FieldValue::Float),
            (-100_000i64..100_000, 0..4u32)
                .prop_map(|(s, k)| FieldValue::Float(s as f64 / 10f64.powi(k as i32))),
            any::<i64>().prop_map(FieldValue::Int),
            any::<u64>().prop_map(FieldValue::UInt),
            any::<bool>().prop_map(FieldValue::Bool),
            "[a-z\"\\\n]{0,4}".prop_map(FieldValue::Str),
        ]
    }

    /// Ascending readings whose fields come and go, change type and order, with equal
    /// timestamps; names include one that JSON escapes.
    fn readings() -> impl Strategy<Value = Vec<Reading>> {
        let names = proptest::sample::subsequence(vec!["a", "b", "q\"t"], 0..=3).prop_shuffle();
        proptest::collection::vec((0..3i64, names, proptest::collection::vec(value(), 3)), 0..40)
            .prop_map(|rows| {
                let mut ts = 0;
                rows.into_iter()
                    .map(|(step, names, values)| {
                        ts += step;
                        let fields = names.into_iter().map(FieldName::from).zip(values).collect();
                        Reading { ts, fields }
                    })
                    .collect()
            })
    }

    proptest::proptest! {
        /// A page written from the store's columns is byte for byte the page written from
        /// the same readings one by one, in either order and for any part of the run.
        #[test]
        fn columns_are_written_as_their_readings_are(
            readings in readings(),
            from in 0..20i64,
            len in 0..40i64,
            first in 0..50usize,
            desc in any::<bool>(),
        ) {
            let order = if desc { Order::Desc } else { Order::Asc };
            let mut cols = Columns::from_readings(&readings);
            cols.keep(from, from + len);
            cols.keep_first(first, desc);
            let mut expected: Vec<&Reading> =
                readings.iter().filter(|r| r.ts >= from && r.ts < from + len).collect();
            if desc {
                expected.reverse();
            }
            expected.truncate(first);
            let (mut want, mut ts) = (Vec::new(), TsWriter::new());
            for r in expected {
                write_json_row(&mut want, &mut ts, r);
            }

            let runs = stream::iter([Ok(Run::Columns(cols))]).boxed();
            let mut source = Source::new(runs, Vec::new(), order, None);
            let (mut got, mut ts) = (Vec::new(), TsWriter::new());
            futures::executor::block_on(async {
                while let Some(row) = std::future::poll_fn(|cx| source.poll_row(cx)).await {
                    row.unwrap();
                    source.write_json(&mut got, &mut ts);
                }
            });
            proptest::prop_assert_eq!(String::from_utf8(got).unwrap(), String::from_utf8(want).unwrap());
        }
    }
}
