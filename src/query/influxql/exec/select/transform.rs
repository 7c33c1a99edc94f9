//! InfluxQL's transformations over a series' rows: `derivative`, `non_negative_derivative`,
//! `difference`, `non_negative_difference`, `cumulative_sum` and `moving_average`. They take
//! the rows a raw select or an aggregate produced (after fill), skip the null ones, and make
//! new rows, as InfluxDB does.

use serde_json::Value;

use crate::query::influxql::exec::agg::float;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Transform {
    /// Change per `unit_ms` between consecutive values: by default a second, and over
    /// `GROUP BY time` windows a window.
    Derivative {
        unit_ms: Option<i64>,
        non_negative: bool,
    },
    Difference {
        non_negative: bool,
    },
    CumulativeSum,
    /// The mean of the last `n` values.
    MovingAverage(usize),
    /// The time between consecutive values, in whole `unit_ns`.
    Elapsed {
        unit_ns: i64,
    },
}

impl Transform {
    pub(super) fn of(name: &str) -> bool {
        matches!(
            name,
            "derivative"
                | "non_negative_derivative"
                | "difference"
                | "non_negative_difference"
                | "cumulative_sum"
                | "moving_average"
                | "elapsed"
        )
    }
}

impl Transform {
    /// Whether InfluxDB starts it one window early over `GROUP BY time` windows, so that the
    /// range's first window has a row.
    pub(super) fn reaches_back(&self) -> bool {
        matches!(
            self,
            Transform::Derivative { .. }
                | Transform::Difference { .. }
                | Transform::MovingAverage(_)
        )
    }
}

/// Rows are `[time_ms, value]`, in the order they are answered (descending times for `ORDER BY
/// time DESC`, where a derivative still divides by the time between the values); a row without
/// a value (without a numeric one, except for
/// `elapsed`, which looks at times only) is skipped.
pub(super) fn apply(t: Transform, rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    let wanted = |v: &&Value| match t {
        Transform::Elapsed { .. } => !v.is_null(),
        _ => v.is_number(),
    };
    let points: Vec<(i64, Value)> = rows
        .into_iter()
        .filter_map(|r| Some((r.first()?.as_i64()?, r.get(1).filter(wanted)?.clone())))
        .collect();
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let mut out = Vec::new();
    match t {
        Transform::Derivative { unit_ms, non_negative } => {
            for pair in points.windows(2) {
                let ((pt, pv), (ct, cv)) = (&pair[0], &pair[1]);
                if ct == pt {
                    continue;
                }
                let unit_ms = unit_ms.unwrap_or(1_000);
                let d = (f(cv) - f(pv)) / ((ct - pt).abs() as f64 / unit_ms as f64);
                if non_negative && d < 0.0 {
                    continue;
                }
                out.push(vec![Value::from(*ct), float(d)]);
            }
        }
        Transform::Difference { non_negative } => {
            for pair in points.windows(2) {
                let ((_, pv), (ct, cv)) = (&pair[0], &pair[1]);
                let d = match (
                    pv.as_i64().filter(|_| pv.is_i64()),
                    cv.as_i64().filter(|_| cv.is_i64()),
                ) {
                    (Some(a), Some(b)) => match b.checked_sub(a) {
                        Some(d) => Value::from(d),
                        None => continue,
                    },
                    _ => float(f(cv) - f(pv)),
                };
                if non_negative && d.as_f64().is_some_and(|d| d < 0.0) {
                    continue;
                }
                out.push(vec![Value::from(*ct), d]);
            }
        }
        Transform::CumulativeSum => {
            let all_int = points.iter().all(|(_, v)| v.is_i64());
            let (mut int, mut sum) = (0i64, 0.0);
            for (t, v) in &points {
                let value = if all_int {
                    int = int.saturating_add(v.as_i64().unwrap_or(0));
                    Value::from(int)
                } else {
                    sum += f(v);
                    float(sum)
                };
                out.push(vec![Value::from(*t), value]);
            }
        }
        Transform::Elapsed { unit_ns } => {
            for pair in points.windows(2) {
                let ((pt, _), (ct, _)) = (&pair[0], &pair[1]);
                let ns = i128::from(ct - pt) * 1_000_000;
                let elapsed = i64::try_from(ns / i128::from(unit_ns)).unwrap_or(i64::MAX);
                out.push(vec![Value::from(*ct), Value::from(elapsed)]);
            }
        }
        Transform::MovingAverage(n) => {
            // A running sum, as InfluxDB keeps it: each value added as it comes and taken off
            // as it leaves, so a float's rounding carries over as InfluxDB's does. Integers sum
            // exactly.
            let ints = points.iter().all(|(_, v)| v.is_i64());
            let (mut sum, mut int_sum) = (0.0f64, 0i64);
            for (end, (t, v)) in points.iter().enumerate() {
                if let Some((_, old)) = end.checked_sub(n).map(|k| &points[k]) {
                    sum -= f(old);
                    int_sum = int_sum.wrapping_sub(old.as_i64().unwrap_or(0));
                }
                sum += f(v);
                int_sum = int_sum.wrapping_add(v.as_i64().unwrap_or(0));
                if end + 1 >= n {
                    let total = if ints { int_sum as f64 } else { sum };
                    out.push(vec![Value::from(*t), float(total / n as f64)]);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows(v: &[(i64, Value)]) -> Vec<Vec<Value>> {
        v.iter().map(|(t, v)| vec![json!(t), v.clone()]).collect()
    }

    #[test]
    fn derivative_skips_nulls_and_scales_by_the_unit() {
        let r =
            rows(&[(0, json!(1.0)), (1000, Value::Null), (2000, json!(5.0)), (3000, json!(4.0))]);
        let d = Transform::Derivative { unit_ms: None, non_negative: false };
        assert_eq!(
            apply(d, r.clone()),
            vec![vec![json!(2000), json!(2.0)], vec![json!(3000), json!(-1.0)]]
        );
        let nn = Transform::Derivative { unit_ms: Some(60_000), non_negative: true };
        assert_eq!(apply(nn, r), vec![vec![json!(2000), json!(120.0)]]);
    }

    #[test]
    fn integer_differences_and_sums_stay_integers() {
        let r = rows(&[(0, json!(3)), (10, json!(1)), (20, json!(7))]);
        assert_eq!(
            apply(Transform::Difference { non_negative: true }, r.clone()),
            vec![vec![json!(20), json!(6)]]
        );
        assert_eq!(apply(Transform::CumulativeSum, r.clone())[2], vec![json!(20), json!(11)]);
        assert_eq!(
            apply(Transform::MovingAverage(2), r),
            vec![vec![json!(10), json!(2.0)], vec![json!(20), json!(4.0)]]
        );
    }

    /// InfluxDB keeps a running sum, so its float rounding differs from each window's own
    /// mean: (0.2 + 0.7) / 2 is 0.44999999999999996, the running sum gives 0.45.
    #[test]
    fn moving_average_rounds_as_a_running_sum() {
        let r = rows(&[(0, json!(0.1)), (10, json!(0.2)), (20, json!(0.7))]);
        let out = apply(Transform::MovingAverage(2), r);
        assert_eq!(out[1], vec![json!(20), json!(0.45)]);
    }
}
