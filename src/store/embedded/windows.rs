//! A rollup's statistics per step, folded straight from chunks' number columns
//! ([`scan_numbers`](super::codec::scan_numbers)) or, for a bucket that lies within one step, from its header.

use super::EmbeddedError;
use super::codec::{HeaderView, NumberSink};
use crate::model::TimestampMs;
use crate::store::{
    FieldStats, Need, RollupSteps, StepOfValues, StepValues, add_to_step_with_room,
};

/// Per wanted field, the step being filled and the steps done.
pub(super) struct Windows<'q> {
    step: TimestampMs,
    need: Need,
    /// Steps the first field is expected to fill: its list is made that long at once. A
    /// statement mostly reads one field; the others' lists grow as they fill, so that many
    /// fields of few values each do not make long lists.
    expect: usize,
    wanted: Option<&'q [String]>,
    names: Vec<String>,
    open: Vec<Open>,
    done: Vec<Done>,
}

/// The step a field's values are going into.
struct Open {
    start: TimestampMs,
    end: TimestampMs,
    stats: Option<FieldStats>,
}

/// A field's finished steps, ascending unless chunks or buckets came out of order.
#[derive(Default)]
struct Done {
    steps: Vec<(TimestampMs, FieldStats)>,
    sorted: bool,
}

impl Done {
    fn add(&mut self, start: TimestampMs, stats: FieldStats) {
        match self.steps.last_mut() {
            Some((last, s)) if *last == start => s.merge(&stats),
            Some((last, _)) if *last > start => {
                self.sorted = false;
                self.steps.push((start, stats));
            }
            _ => self.steps.push((start, stats)),
        }
    }

    /// Ascending, one entry per step.
    fn finish(mut self) -> Vec<(TimestampMs, FieldStats)> {
        if self.sorted {
            return self.steps;
        }
        // Stable: a step's parts merge in the order they were folded.
        self.steps.sort_by_key(|(start, _)| *start);
        let mut out: Vec<(TimestampMs, FieldStats)> = Vec::with_capacity(self.steps.len());
        for (start, stats) in self.steps {
            match out.last_mut() {
                Some((last, s)) if *last == start => s.merge(&stats),
                _ => out.push((start, stats)),
            }
        }
        out
    }
}

impl<'q> Windows<'q> {
    pub fn new(step: TimestampMs, wanted: Option<&'q [String]>, need: Need) -> Self {
        let (names, open, done) = (Vec::new(), Vec::new(), Vec::new());
        Windows { step, need, expect: 0, wanted, names, open, done }
    }

    /// Expects the steps of `from..to`, at most `most` of them.
    pub fn expecting(mut self, from: TimestampMs, to: TimestampMs, most: usize) -> Self {
        let steps = (i128::from(to) - i128::from(from)) / i128::from(self.step) + 1;
        self.expect = usize::try_from(steps).unwrap_or(usize::MAX).min(most);
        self
    }

    fn start_of(&self, ts: TimestampMs) -> TimestampMs {
        ts.div_euclid(self.step) * self.step
    }

    /// Folds a bucket whose readings are all in the range and in one step from its header's
    /// statistics; `false` (nothing folded) when they are not, or the header lacks first/last.
    pub fn whole_bucket(
        &mut self,
        header: &HeaderView<'_>,
        from: TimestampMs,
        to: TimestampMs,
    ) -> Result<bool, EmbeddedError> {
        let start = self.start_of(header.min_ts);
        let inside = header.min_ts >= from && header.max_ts < to;
        if !inside || self.start_of(header.max_ts) != start {
            return Ok(false);
        }
        let mut lacks_first_last = false;
        header.each_stat(|_, s| lacks_first_last |= s.first.is_none() || s.last.is_none())?;
        if lacks_first_last {
            return Ok(false);
        }
        header.each_stat(|name, stats| {
            if let Some(slot) = self.slot(name) {
                self.done[slot].add(start, stats);
            }
        })?;
        Ok(true)
    }

    /// Each field's steps, ascending; a step where a field had no number is left out.
    pub fn finish(mut self) -> RollupSteps {
        for slot in 0..self.open.len() {
            self.close(slot);
        }
        let fields = self.names.into_iter().zip(self.done.into_iter().map(Done::finish));
        RollupSteps { fields: fields.collect() }
    }

    /// Walks field `slot`'s values at `ts` step by step: a step's statistics are made of its
    /// first value by `first(i)`, and each run of values within one step (`run`, a range of
    /// `ts`) is added to them by `add`.
    fn runs(
        &mut self,
        slot: usize,
        ts: &[TimestampMs],
        first: impl Fn(usize) -> FieldStats,
        mut add: impl FnMut(&mut FieldStats, std::ops::Range<usize>, Need),
    ) {
        let mut at = 0;
        while at < ts.len() {
            let open = &mut self.open[slot];
            let Some(stats) = open.stats.as_mut().filter(|_| ts[at] >= open.start) else {
                self.close(slot);
                let start = self.start_of(ts[at]);
                let open = &mut self.open[slot];
                open.start = start;
                open.end = start.saturating_add(self.step);
                open.stats = Some(first(at));
                at += 1;
                continue;
            };
            // The values up to the step's end: times ascend, so they are a run.
            let n = run_before(&ts[at..], open.end);
            if n == 0 {
                self.close(slot);
                continue;
            }
            add(stats, at..at + n, self.need);
            at += n;
        }
    }

    fn close(&mut self, slot: usize) {
        let open = &mut self.open[slot];
        if let Some(stats) = open.stats.take() {
            self.done[slot].add(open.start, stats);
        }
    }
}

impl NumberSink for Windows<'_> {
    fn slot(&mut self, name: &str) -> Option<usize> {
        let (slot, new) = slot_of(&mut self.names, self.wanted, name)?;
        if new {
            self.open.push(Open { start: 0, end: 0, stats: None });
            let expect = if slot == 0 { self.expect } else { 0 };
            self.done.push(Done { steps: Vec::with_capacity(expect), sorted: true });
        }
        Some(slot)
    }

    fn values(&mut self, slot: usize, ts: &[TimestampMs], values: &[f64]) {
        self.runs(
            slot,
            ts,
            |i| FieldStats::of(ts[i], values[i]),
            |stats, run, need| stats.push_run_of(&ts[run.clone()], &values[run], need),
        );
    }

    fn takes_scaled(&self) -> bool {
        true
    }

    fn scaled(&mut self, slot: usize, ts: &[TimestampMs], scaled: &[i64], scale: f64) {
        self.runs(
            slot,
            ts,
            |i| FieldStats::of(ts[i], scaled[i] as f64 / scale),
            |stats, run, need| {
                stats.push_scaled_run_of(&ts[run.clone()], &scaled[run], scale, need);
            },
        );
    }

    fn counts_only(&self) -> bool {
        self.need == Need::COUNT
    }
}

/// The slot of field `name` among a sink's `names`, and whether it is new (added here, for the
/// sink to make its parts); `None` for a field not `wanted`.
fn slot_of(
    names: &mut Vec<String>,
    wanted: Option<&[String]>,
    name: &str,
) -> Option<(usize, bool)> {
    if let Some(i) = names.iter().position(|n| n == name) {
        return Some((i, false));
    }
    if wanted.is_some_and(|w| !w.iter().any(|n| n == name)) {
        return None;
    }
    names.push(name.to_owned());
    Some((names.len() - 1, true))
}

/// How many of the ascending `ts` come before `end`. Steps of a minute hold a few values
/// each: those are counted one by one, a longer run is searched.
fn run_before(ts: &[TimestampMs], end: TimestampMs) -> usize {
    const NEAR: usize = 16;
    match ts.get(NEAR) {
        Some(&t) if t < end => NEAR + ts[NEAR..].partition_point(|&t| t < end),
        _ => ts.iter().take(NEAR).take_while(|&&t| t < end).count(),
    }
}

/// Per wanted field, the values of each step (a median's), and how many are held.
pub(super) struct StepSink<'q> {
    step: TimestampMs,
    wanted: Option<&'q [String]>,
    names: Vec<String>,
    steps: Vec<Vec<StepOfValues>>,
    /// Per field, the step values were last added to: a series' values come in time order,
    /// so their step is mostly that one or the next, which are looked at before the steps
    /// are searched.
    near: Vec<usize>,
    pub held: usize,
    /// How many series add to the same steps: a step is made with room for the values of
    /// each of them as many as the first brought, so that it is not grown and copied again
    /// and again as they come.
    series: usize,
    /// How much room beyond the values held may still be made: a bound on what that guess
    /// can cost when the other series have fewer values.
    spare: usize,
    /// Lists the caller was done with, which steps are made of before any is allocated.
    lists: Vec<Vec<f64>>,
}

impl<'q> StepSink<'q> {
    pub fn new(step: TimestampMs, wanted: Option<&'q [String]>) -> Self {
        let (names, steps, near, lists) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        StepSink { step, wanted, names, steps, near, held: 0, series: 1, spare: 0, lists }
    }

    /// Steps made of `lists` (emptied or not) while they last.
    pub fn reusing(mut self, lists: Vec<Vec<f64>>) -> Self {
        self.lists = lists;
        self
    }

    /// Steps that `series` series add to, with room made ahead for at most `spare` values.
    pub fn shared(mut self, series: usize, spare: usize) -> Self {
        (self.series, self.spare) = (series.max(1), spare);
        self
    }

    pub fn finish(self) -> StepValues {
        StepValues { fields: self.names.into_iter().zip(self.steps).collect() }
    }
}

impl NumberSink for StepSink<'_> {
    fn slot(&mut self, name: &str) -> Option<usize> {
        let (slot, new) = slot_of(&mut self.names, self.wanted, name)?;
        if new {
            self.steps.push(Vec::new());
            self.near.push(0);
        }
        Some(slot)
    }

    fn values(&mut self, slot: usize, ts: &[TimestampMs], values: &[f64]) {
        self.held += values.len();
        let mut at = 0;
        while at < ts.len() {
            let start = ts[at].div_euclid(self.step) * self.step;
            let end = start.saturating_add(self.step);
            let n = run_before(&ts[at..], end);
            let room = n.saturating_mul(self.series - 1).min(self.spare);
            let part = &values[at..at + n];
            let (steps, near) = (&mut self.steps[slot], &mut self.near[slot]);
            let found = [*near, *near + 1]
                .into_iter()
                .find(|&i| steps.get(i).is_some_and(|s| s.0 == start));
            if let Some(i) = found {
                steps[i].1.extend_from_slice(part);
                *near = i;
            } else {
                self.spare -= add_to_step_with_room(steps, start, part, n + room, &mut self.lists);
                *near = match steps.last() {
                    Some(last) if last.0 == start => steps.len() - 1,
                    _ => steps.partition_point(|s| s.0 < start),
                };
            }
            at += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_fold_in_any_order_and_merge() {
        let mut w = Windows::new(10, None, Need::ALL);
        let a = w.slot("a").unwrap();
        w.values(a, &[20, 25, 31], &[1.0, 2.0, 3.0]);
        // An earlier chunk after a later one, and a value in a step already done.
        w.values(a, &[3, 27], &[4.0, 5.0]);
        let steps = w.finish();
        let (name, steps) = &steps.fields[0];
        assert_eq!(name, "a");
        let starts: Vec<_> = steps.iter().map(|(start, _)| *start).collect();
        assert_eq!(starts, [0, 20, 30]);
        let s = steps[1].1;
        assert_eq!((s.count, s.sum, s.min, s.max), (3, 8.0, 1.0, 5.0));
        assert_eq!((s.first, s.last), (Some((20, 1.0)), Some((27, 5.0))));
    }

    proptest::proptest! {
        /// Statistics made from a decimal column's integers are those made from its floats:
        /// bit for bit but for the sum, which rounds once instead of at every value.
        #[test]
        fn steps_of_integers_are_the_steps_of_their_floats(
            values in proptest::collection::vec((0..5i64, -100_000i64..100_000), 1..200),
            cuts in proptest::collection::vec(0usize..200, 0..6),
            decimals in 0usize..4,
            step in 1i64..40,
            need in (proptest::bool::ANY, proptest::bool::ANY, proptest::bool::ANY),
        ) {
            let need = Need { sum: need.0, extremes: need.1, edges: need.2 };
            let scale = 10f64.powi(decimals as i32);
            let mut t = 0;
            let ts: Vec<TimestampMs> = values.iter().map(|(d, _)| { t += d; t }).collect();
            let scaled: Vec<i64> = values.iter().map(|(_, s)| *s).collect();
            let floats: Vec<f64> = scaled.iter().map(|&s| s as f64 / scale).collect();
            // The same values handed over in the same pieces (a piece a chunk).
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c < ts.len()).collect();
            cuts.extend([0, ts.len()]);
            cuts.sort_unstable();
            cuts.dedup();
            let (mut a, mut b) = (Windows::new(step, None, need), Windows::new(step, None, need));
            let (sa, sb) = (a.slot("v").unwrap(), b.slot("v").unwrap());
            for piece in cuts.windows(2) {
                let r = piece[0]..piece[1];
                a.values(sa, &ts[r.clone()], &floats[r.clone()]);
                b.scaled(sb, &ts[r.clone()], &scaled[r], scale);
            }
            let (a, b) = (a.finish(), b.finish());
            let (a, b) = (&a.fields[0].1, &b.fields[0].1);
            proptest::prop_assert_eq!(a.len(), b.len());
            for ((start_a, x), (start_b, y)) in a.iter().zip(b) {
                proptest::prop_assert_eq!(start_a, start_b);
                proptest::prop_assert_eq!(x.count, y.count);
                if need.extremes {
                    proptest::prop_assert_eq!((x.min.to_bits(), x.max.to_bits()), (y.min.to_bits(), y.max.to_bits()));
                }
                if need.edges {
                    proptest::prop_assert_eq!((x.first, x.last), (y.first, y.last));
                }
                if need.sum {
                    let close = (x.sum - y.sum).abs() <= 1e-9 * x.sum.abs().max(1.0);
                    proptest::prop_assert!(close, "{} against {}", x.sum, y.sum);
                }
            }
        }
    }

    #[test]
    fn a_run_before_an_end_is_counted_near_and_far() {
        let ts: Vec<TimestampMs> = (0..100).map(|i| i / 3).collect();
        for end in -1..40 {
            let want = ts.iter().filter(|&&t| t < end).count();
            assert_eq!(run_before(&ts, end), want, "end {end}");
            assert_eq!(run_before(&ts[..10], end), want.min(10), "short, end {end}");
        }
    }

    #[test]
    fn only_wanted_fields_get_a_slot() {
        let wanted = ["b".to_owned()];
        let mut w = Windows::new(10, Some(&wanted), Need::ALL);
        assert_eq!(w.slot("a"), None);
        assert_eq!(w.slot("b"), Some(0));
        assert_eq!(w.slot("b"), Some(0));
    }
}
