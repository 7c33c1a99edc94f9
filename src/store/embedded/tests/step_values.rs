//! A series' step values, alone and read with others in one call.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// Per field and step, the values of `written` in the query's range, sorted: what
/// `step_values` holds, in no set order.
fn model_step_values(written: &[Reading], q: &RollupQuery) -> BTreeMap<(String, i64), Vec<f64>> {
    let mut out: BTreeMap<(String, i64), Vec<f64>> = BTreeMap::new();
    for r in written.iter().filter(|r| r.ts >= q.from && r.ts < q.to) {
        for (name, v) in &r.fields {
            let wanted = q.fields.as_ref().is_none_or(|f| f.iter().any(|w| w == name.as_str()));
            if let Some(v) = v.as_f64().filter(|_| wanted) {
                let start = r.ts.div_euclid(q.step_ms) * q.step_ms;
                out.entry((name.to_string(), start)).or_default().push(v);
            }
        }
    }
    out.values_mut().for_each(|vs| vs.sort_by(f64::total_cmp));
    out
}

/// `values` by field and step, each step's values sorted; its steps must ascend.
fn sorted_steps(values: StepValues) -> Result<BTreeMap<(String, i64), Vec<f64>>, TestCaseError> {
    let mut out = BTreeMap::new();
    for (name, steps) in values.fields {
        prop_assert!(steps.windows(2).all(|w| w[0].0 < w[1].0), "steps ascend");
        for (start, mut vs) in steps {
            vs.sort_by(f64::total_cmp);
            out.insert((name.clone(), start), vs);
        }
    }
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// A series' step values are its readings' numbers per step, whatever the spills and the
    /// order written, and a bound below them is met with `None`.
    #[test]
    fn step_values_are_the_readings_numbers_per_step(
        points in proptest::collection::vec((0i64..3 * 3600, -50i32..50, any::<bool>()), 1..200),
        step_s in prop_oneof![Just(60i64), Just(420), Just(1800), Just(7200)],
        only_a in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), BucketLimits { max_readings: 16, max_bytes: 1 << 20 });
        let s = meta("s", "m", &[]);
        let written: Vec<Reading> = points
            .iter()
            .map(|&(sec, v, with_b)| {
                let mut fields = smallvec::smallvec![("a".into(), FieldValue::Float(f64::from(v) / 4.0))];
                if with_b {
                    fields.push(("b".into(), FieldValue::Int(i64::from(v))));
                    fields.push(("s".into(), FieldValue::Str("x".into())));
                }
                Reading { ts: sec * 1000, fields }
            })
            .collect();
        rt.block_on(write_ok(&store, &batches(&s, &written)));
        let q = RollupQuery {
            sensor: "s".into(),
            from: 600_000,
            to: 2 * HOUR_MS + 1234,
            step_ms: step_s * 1000,
            fields: only_a.then(|| vec!["a".into()]),
        };
        let got = rt.block_on(store.step_values(q.clone(), usize::MAX)).unwrap().unwrap();
        let got_sorted = sorted_steps(got)?;
        // One value per point: readings of one time are one, the later winning.
        let mut stored = written.clone();
        crate::model::fold_points(&mut stored);
        let want = model_step_values(&stored, &q);
        prop_assert_eq!(&got_sorted, &want);
        let total: usize = want.values().map(Vec::len).sum();
        // Asked together with an unknown series and a second one: each step holds the
        // values of both, and a bound below them is met with `None`.
        let t = meta("t", "m", &[]);
        let shifted: Vec<Reading> = written
            .iter()
            .map(|r| Reading { ts: r.ts + 7_000, fields: r.fields.clone() })
            .collect();
        rt.block_on(write_ok(&store, &batches(&t, &shifted)));
        let mut shifted_stored = shifted;
        crate::model::fold_points(&mut shifted_stored);
        let mut both_want = want.clone();
        for (step, mut vs) in model_step_values(&shifted_stored, &q) {
            let held = both_want.entry(step).or_default();
            held.append(&mut vs);
            held.sort_by(f64::total_cmp);
        }
        let other = RollupQuery { sensor: "none".into(), ..q.clone() };
        let second = RollupQuery { sensor: "t".into(), ..q.clone() };
        let together = vec![second.clone(), other, q.clone()];
        let both_total: usize = both_want.values().map(Vec::len).sum();
        // Lists done with, still holding values, are filled again without them.
        let lists = vec![vec![-1.0; 5], Vec::new(), vec![-2.0; 300]];
        let both = rt.block_on(store.step_values_of(together.clone(), both_total, lists));
        let both = both.unwrap().expect("exactly the values of both");
        prop_assert_eq!(&sorted_steps(both)?, &both_want);
        if total > 0 {
            let bounded = rt.block_on(store.step_values(q.clone(), total - 1)).unwrap();
            prop_assert!(bounded.is_none());
            let bounded = rt.block_on(store.step_values_of(together, both_total - 1, Vec::new())).unwrap();
            prop_assert!(bounded.is_none());
        }
    }
}
