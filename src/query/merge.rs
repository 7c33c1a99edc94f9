//! Merging readings not yet flushed into the store's stream.
//!
//! Tie rule: ascending, store readings come before unflushed readings of the same timestamp
//! (they were written earlier); descending is the exact mirror, unflushed first. The merged
//! sequence of one range in `Desc` is then the reverse of the one in `Asc`, as the store's own
//! order is, and the cursor's "k readings at time t already returned" means the same readings
//! before and after a flush moves them from the buffers into the store.

use futures::stream::{self, BoxStream, Peekable, StreamExt};
use std::pin::Pin;

use crate::model::{Reading, TimestampMs};
use crate::store::{Order, StoreError};

type StoreStream = BoxStream<'static, Result<Reading, StoreError>>;

/// Whether the unflushed reading at `unflushed` goes before the stored one at `stored`: the tie
/// rule above.
pub(super) fn unflushed_first(order: Order, unflushed: TimestampMs, stored: TimestampMs) -> bool {
    match order {
        Order::Asc => unflushed < stored,
        Order::Desc => unflushed >= stored,
    }
}

/// `unflushed` must be ascending by timestamp, arrival order for ties (what the buffers give).
/// The store stream ends the merge at its first error.
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
        let take_unflushed = match (Pin::new(&mut st.store).peek().await, st.unflushed.peek()) {
            (Some(Ok(s)), Some(u)) => unflushed_first(order, u.ts, s.ts),
            (Some(Err(_)), _) => false,
            (None, Some(_)) => true,
            (Some(Ok(_)), None) => false,
            (None, None) => return None,
        };
        let item = if take_unflushed {
            Ok(st.unflushed.next().expect("peeked"))
        } else {
            st.store.next().await.expect("peeked")
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
    async fn ascending_store_first_on_ties() {
        let got = run(
            vec![r(1, "s"), r(3, "s"), r(3, "s2")],
            vec![r(0, "u"), r(3, "u"), r(4, "u")],
            Order::Asc,
        )
        .await;
        let want: Vec<_> = [(0, "u"), (1, "s"), (3, "s"), (3, "s2"), (3, "u"), (4, "u")]
            .iter()
            .map(|(t, l)| (*t, l.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn descending_is_the_mirror_of_ascending() {
        let store = vec![r(1, "s"), r(3, "s"), r(3, "s2")];
        let unflushed = vec![r(0, "u"), r(3, "u"), r(3, "u2"), r(4, "u")];
        let mut asc = run(store.clone(), unflushed.clone(), Order::Asc).await;
        let desc_store: Vec<Reading> = store.into_iter().rev().collect();
        let desc = run(desc_store, unflushed, Order::Desc).await;
        asc.reverse();
        assert_eq!(desc, asc);
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
