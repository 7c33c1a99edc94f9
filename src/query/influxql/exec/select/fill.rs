//! `fill(…)`: what an aggregate answers for a window without values, as InfluxDB fills.

use serde_json::Value;

use crate::model::TimestampMs;
use crate::query::influxql::exec::agg::float;
use crate::query::influxql::syntax::ast::Fill;

/// A function's value in one window, with the time of the reading a selector picked; `None`
/// when the window had nothing it counts (so fill applies).
pub(super) type Cell = Option<(Value, Option<TimestampMs>)>;

/// `fill(…)` over one function's windows. `count` answers 0 for an empty window under
/// `fill(null)`, and `fill(previous)` follows the order rows are answered in (`descending`:
/// from the latest window back), as InfluxDB does.
pub(super) fn fill(
    col: &mut [Cell],
    starts: &[TimestampMs],
    fill: Fill,
    is_count: bool,
    descending: bool,
) {
    match fill {
        Fill::None => {}
        Fill::Null => {
            if is_count {
                for v in col.iter_mut().filter(|v| v.is_none()) {
                    *v = Some((Value::from(0), None));
                }
            }
        }
        Fill::Number(n) => {
            let value =
                if n.fract() == 0.0 && n.abs() < 9.0e15 { Value::from(n as i64) } else { float(n) };
            for v in col.iter_mut().filter(|v| v.is_none()) {
                *v = Some((value.clone(), None));
            }
        }
        Fill::Previous => {
            let mut prev: Option<Value> = None;
            let cells: Box<dyn Iterator<Item = &mut Cell>> =
                if descending { Box::new(col.iter_mut().rev()) } else { Box::new(col.iter_mut()) };
            for v in cells {
                match v {
                    Some((value, _)) => prev = Some(value.clone()),
                    None => *v = prev.clone().map(|p| (p, None)),
                }
            }
        }
        Fill::Linear => {
            // As InfluxDB's fill iterator: an empty window is drawn between the last window
            // before it and the next after it (in output order) that have a row. A null row (a
            // `stddev` of one value) on either side leaves it null.
            let all_int = col.iter().flatten().all(|(v, _)| v.is_i64() || v.is_null());
            let order: Vec<usize> =
                if descending { (0..col.len()).rev().collect() } else { (0..col.len()).collect() };
            let mut prev: Option<(usize, Option<f64>)> = None;
            for (at, &k) in order.iter().enumerate() {
                if let Some((v, _)) = &col[k] {
                    prev = Some((k, v.as_f64()));
                    continue;
                }
                let Some((a, Some(va))) = prev else { continue };
                let Some(&b) = order[at + 1..].iter().find(|&&j| col[j].is_some()) else {
                    continue;
                };
                let Some(vb) = col[b].as_ref().and_then(|(v, _)| v.as_f64()) else { continue };
                let frac = (starts[k] - starts[a]) as f64 / (starts[b] - starts[a]) as f64;
                let v = va + (vb - va) * frac;
                col[k] = Some((if all_int { Value::from(v as i64) } else { float(v) }, None));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fill(linear)` draws an empty window between the rows around it; a null row (`stddev` of
    /// one value) is a row, not filled, and one beside an empty window leaves it null. InfluxDB
    /// 1.6 answers `stddev(v) … GROUP BY time(10s) fill(linear)` over 1, 3 at 0–1 s, 7 at 20 s,
    /// 2, 8 at 40–41 s and 5, 9 at 60–61 s with 1.41, null, null, null, 4.24, 3.54, 2.83.
    #[test]
    fn linear_fill_skips_null_rows_as_influxdb_does() {
        let starts = [0, 10, 20, 30, 40];
        let mut col: Vec<Cell> = vec![
            Some((float(1.0), None)),
            None,
            Some((Value::Null, None)),
            None,
            Some((float(5.0), None)),
        ];
        fill(&mut col, &starts, Fill::Linear, false, false);
        assert_eq!(col[1], None);
        assert_eq!(col[2], Some((Value::Null, None)));
        assert_eq!(col[3], None);
        let mut col: Vec<Cell> = vec![Some((float(2.0), None)), None, Some((float(4.0), None))];
        fill(&mut col, &[0, 10, 20], Fill::Linear, false, true);
        assert_eq!(col[1], Some((float(3.0), None)));
    }
}
