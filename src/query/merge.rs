//! Merging readings not yet flushed into the store's stream.
//!
//! A point is stored once: a stored and an unflushed reading of one timestamp are one reading,
//! the stored one with the unflushed one's fields written over it (`Reading::overlay`), as the
//! store will hold it once the buffer is flushed. The buffers hand over one reading per
//! timestamp already. So the merged sequence of one range in `Desc` is the reverse of the one
//! in `Asc`, and a cursor's "k readings at time t already returned" means the same readings
//! before and after a flush moves them from the buffers into the store.

use futures::stream::{self, BoxStream, Peekable, StreamExt};
use std::pin::Pin;

use crate::model::{Reading, TimestampMs};
use crate::store::{Order, StoreError};

type StoreStream = BoxStream<'static, Result<Reading, StoreError>>;

/// Which of the next stored and unflushed readings comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next {
    Stored,
    Unflushed,
    /// One point: the stored reading, the unflushed one written over it.
    Both,
}

/// The next side for the unflushed reading at `unflushed` and the stored one at `stored`.
pub(super) fn next(order: Order, unflushed: TimestampMs, stored: TimestampMs) -> Next {
    match (order, unflushed.cmp(&stored)) {
        (_, std::cmp::Ordering::Equal) => Next::Both,
        (Order::Asc, std::cmp::Ordering::Less) | (Order::Desc, std::cmp::Ordering::Greater) => {
            Next::Unflushed
        }
        _ => Next::Stored,
    }
}

/// `unflushed` must be ascending by timestamp, one reading per timestamp (what the buffers
/// give). The store stream ends the merge at its first error.
pub fn merge(store: StoreStream, mut unflushed: Vec<Reading>, order: Order) -> StoreStream {
    if unflushed.is_empty() {
        return store;
    }
    if order == Order::Desc {
        unflushed.reverse();
    }
    struct State {
        store: Peekable<StoreStream>,
        unflushed: std::iter::Peekable<std::vec::IntoIter<Reading>>,
        failed: bool,
    }
    let state = State {
        store: store.peekable(),
        unflushed: unflushed.into_iter().peekable(),
        failed: false,
    };
    stream::unfold(state, move |mut st| async move {
        if st.failed {
            return None;
        }
        let side = match (Pin::new(&mut st.store).peek().await, st.unflushed.peek()) {
            (Some(Ok(s)), Some(u)) => next(order, u.ts, s.ts),
            (Some(Err(_)), _) | (Some(Ok(_)), None) => Next::Stored,
            (None, Some(_)) => Next::Unflushed,
            (None, None) => return None,
        };
        let item = match side {
            Next::Unflushed => Ok(st.unflushed.next().expect("peeked")),
            Next::Stored => st.store.next().await.expect("peeked"),
            Next::Both => st.store.next().await.expect("peeked").map(|mut stored| {
                stored.overlay(&st.unflushed.next().expect("peeked"));
                stored
            }),
        };
        st.failed = item.is_err();
        Some((item, st))
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FieldValue;

    fn r(ts: i64, tag: &str) -> Reading {
        Reading { ts, fields: smallvec::smallvec![(tag.into(), FieldValue::Int(ts))] }
    }

    fn label(r: &Reading) -> (i64, String) {
        (r.ts, r.fields[0].0.to_string())
    }

    async fn run(store: Vec<Reading>, unflushed: Vec<Reading>, order: Order) -> Vec<(i64, String)> {
        let s = stream::iter(store.into_iter().map(Ok)).boxed();
        merge(s, unflushed, order).map(|r| label(&r.unwrap())).collect().await
    }

    #[tokio::test]
    async fn a_stored_and_an_unflushed_reading_of_one_time_are_one() {
        let mut s3 = r(3, "s");
        s3.fields.push(("x".into(), FieldValue::Int(1)));
        let got = run(vec![r(1, "s"), s3], vec![r(0, "u"), r(3, "s"), r(4, "u")], Order::Asc).await;
        let want: Vec<_> = [(0, "u"), (1, "s"), (3, "s"), (4, "u")]
            .iter()
            .map(|(t, l)| (*t, l.to_string()))
            .collect();
        assert_eq!(got, want);
        let s = stream::iter(vec![Ok(r(3, "a"))]).boxed();
        let mut u = r(3, "a");
        u.fields[0].1 = FieldValue::Int(9);
        u.fields.push(("b".into(), FieldValue::Int(2)));
        let merged: Vec<Reading> =
            merge(s, vec![u.clone()], Order::Asc).map(Result::unwrap).collect().await;
        assert_eq!(merged, vec![u]);
    }

    #[tokio::test]
    async fn descending_is_the_mirror_of_ascending() {
        let store = vec![r(1, "s"), r(3, "s"), r(5, "s")];
        let unflushed = vec![r(0, "u"), r(3, "u"), r(4, "u")];
        let mut asc = run(store.clone(), unflushed.clone(), Order::Asc).await;
        let desc_store: Vec<Reading> = store.into_iter().rev().collect();
        let desc = run(desc_store, unflushed, Order::Desc).await;
        asc.reverse();
        assert_eq!(desc, asc);
        assert_eq!(asc.len(), 5);
    }

    #[tokio::test]
    async fn a_store_error_ends_the_merge() {
        let s = stream::iter(vec![
            Ok(r(1, "s")),
            Err(StoreError::Unavailable("x".into())),
            Ok(r(2, "s")),
        ])
        .boxed();
        let got: Vec<_> = merge(s, vec![r(5, "u")], Order::Asc).collect().await;
        assert_eq!(got.len(), 2);
        assert!(got[1].is_err());
    }
}
